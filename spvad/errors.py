"""Every error spvad raises on purpose: one base class, one subclass per kind of failure."""


class SpvadError(Exception):
    """Base of all errors spvad raises on purpose."""


class CompileError(SpvadError):
    """Python that spvad cannot compile; names file, line and the offending source text."""

    def __init__(self, message, filename=None, lineno=None, source=None):
        self.message, self.filename, self.lineno, self.source = message, filename, lineno, source
        where = f"{filename}:{lineno}: " if filename and lineno else ""
        text = f"\n    {source.strip()}" if source else ""
        super().__init__(f"{where}{message}{text}")


class ArgumentError(SpvadError, TypeError):
    """A kernel or API call got an argument of the wrong dtype, shape, ndim, layout or count."""


class ThreadCountError(ArgumentError):
    """A launch needs more threads than 32-bit indices can count (at most 2**31 - 1 per launch)."""


class SpirvValidationError(SpvadError):
    """spirv-val rejected an emitted module; carries its message and the kernel name."""


class PipelineCreationError(SpvadError):
    """The driver refused a compute pipeline: kernel name, backend, driver result and message."""


class AdStackOverflowError(SpvadError):
    """An adstack ran out of capacity on the device; names the kernel and the capacity that suffices."""


class AutodiffRuleError(SpvadError):
    """A kernel breaks a rule of automatic differentiation (e.g. overwrites an element it read)."""


class DeviceError(SpvadError):
    """The device or driver failed outside pipeline creation (no device, lost device, bad feature)."""


class ReentryError(SpvadError, RuntimeError):
    """spvad was called from a signal handler that interrupted this thread inside spvad; nothing changed."""
