"""Metal compute pipelines (MSL from SPIRV-Cross, specialised per spec-constant values) and launch recording.

`ProgramMixin` is mixed into `MetalDevice` (device.py owns the MTLDevice, buffers, command buffers and sync).
The functions above it touch no Metal object, so they are tested on Linux.
"""
import re

from ...errors import DeviceError, PipelineCreationError
from ..base import Pipeline
from .translate import MslTranslationError, translate_spirv

MEMORY_WORDS = re.compile(r"memory|stack|spill|register|too (large|big)|exceed|size", re.I)
HINT = ("hint: per-thread adstack arrays may be too large for this GPU; lower ad_stack_size "
        "(@sp.kernel(ad_stack_size=N) or sp.init(ad_stack_size=N))")
# MSL type of a function constant -> its MTLDataType (looked up on the Metal module when needed).
METAL_TYPES = {"uint": lambda M: M.MTLDataTypeUInt, "int": lambda M: M.MTLDataTypeInt,
               "float": lambda M: M.MTLDataTypeFloat, "bool": lambda M: M.MTLDataTypeBool}


def fold_groups(num_groups, max_x):
    """(gx, gy, 1) covering `num_groups` 1-D workgroups with gx <= max_x (the Vulkan path's folding; the
    kernels compute tid = (group.y * groups.x + group.x) * local_size + local index and skip tid >= n)."""
    if num_groups <= 0:
        return (0, 1, 1)
    gx = min(num_groups, max_x)
    gy = -(-num_groups // gx)
    if gy > max_x:
        raise DeviceError(f"{num_groups} workgroups do not fit a {max_x} x {max_x} grid")
    return (gx, gy, 1)


def pipeline_error(name, stage, text):
    """PipelineCreationError naming the kernel, the backend and the compiler's text (with a hint to lower
    ad_stack_size when the text is about memory or sizes)."""
    msg = f"kernel '{name}' (backend metal): {stage} failed: {text}"
    if MEMORY_WORDS.search(text):
        msg += f"; {HINT}"
    err = PipelineCreationError(msg)
    err.kernel, err.backend, err.result, err.driver_messages = name, "metal", stage, [text]
    return err


def check_threads(name, local_size, max_threads):
    """Raise unless the pipeline takes `local_size` threads per threadgroup (the SPIR-V LocalSize is baked
    into the thread index): Metal lowers maxTotalThreadsPerThreadgroup for kernels with much private memory."""
    threads = local_size[0] * local_size[1] * local_size[2]
    if threads > max_threads:
        raise pipeline_error(name, "newComputePipelineState",
                             f"the pipeline allows {max_threads} threads per threadgroup but the kernel was "
                             f"compiled for {threads}: its per-thread memory (adstacks) is too large")


def compile_options(Metal, fast_math):
    """MTLCompileOptions for MSL 2.1 with fast math on or off. Metal compiles with fast math by default
    (reassociation, FMA contraction, approximate transcendentals, no NaN/inf guarantees); fast_math False
    turns it off, and on macOS 15+ also asks for the safe math mode and precise math functions."""
    options = Metal.MTLCompileOptions.new()
    options.setLanguageVersion_(Metal.MTLLanguageVersion2_1)
    options.setFastMathEnabled_(bool(fast_math))
    if not fast_math and hasattr(options, "setMathMode_"):   # the newer API (fastMathEnabled is deprecated)
        options.setMathMode_(Metal.MTLMathModeSafe)
        options.setMathFloatingPointFunctions_(Metal.MTLMathFloatingPointFunctionsPrecise)
    return options


def error_text(err):
    """The message of an NSError (or of anything else that explains a failure)."""
    if err is None:
        return "no error object returned"
    try:
        return str(err.localizedDescription())
    except Exception:   # noqa: BLE001 - any object: describe it as it is
        return str(err)


class MetalPipeline(Pipeline):
    """A compute pipeline state plus what `launch` needs: the MSL program's buffer mapping and thread count."""

    def __init__(self, device, state, program, name, num_buffers, push_constant_size):
        self._device, self._state, self.program = device, state, program
        self.name, self.num_buffers, self.push_constant_size = name, num_buffers, push_constant_size
        self.threads = program.local_size

    def release(self):
        # Command buffers retain the pipeline states they use, so dropping ours is safe at any time.
        if self._state is not None:
            self._state = None
            self._device._pipelines.discard(self)

    def __repr__(self):
        return f"<MetalPipeline {self.name!r} buffers={self.num_buffers} push={self.push_constant_size}" \
               f"{' released' if self._state is None else ''}>"


class ProgramMixin:
    """Pipeline creation and `launch` for MetalDevice. Expects `_mtl` (the Metal module), `_device`,
    `_pipelines` (set), `_translations` (dict), `_check_open()` and `_encoder()`."""

    def _translate(self, spirv, name, num_buffers, push_size):
        key = (spirv, num_buffers, push_size)
        program = self._translations.get(key)
        if program is None:
            program = self._translations[key] = translate_spirv(spirv, name, num_buffers, push_size)
        return program

    def create_pipeline(self, spirv, *, name, num_buffers, push_constant_size, spec_constants=None,
                        entry="main", fast_math=True):
        """See base.Device.create_pipeline. `entry` names the SPIR-V entry point; the MSL one is the
        translator's (main0); `fast_math` False compiles the MSL without fast math (compile_options).
        Never raises anything but PipelineCreationError/DeviceError."""
        self._check_open()
        Metal, spec = self._mtl, dict(spec_constants or {})
        try:
            program = self._translate(bytes(spirv), name, int(num_buffers), int(push_constant_size))
            source = program.specialized_source(spec)
            constants = program.function_constants(spec)
        except MslTranslationError as exc:
            raise pipeline_error(name, "SPIR-V -> MSL translation", str(exc)) from None
        try:
            with self._pool():
                options = compile_options(Metal, fast_math)
                library, err = self._device.newLibraryWithSource_options_error_(source, options, None)
                if library is None:
                    raise pipeline_error(name, "newLibraryWithSource", error_text(err))
                values = Metal.MTLFunctionConstantValues.new()
                for index, ty, data in constants:
                    values.setConstantValue_type_atIndex_(data, METAL_TYPES[ty](Metal), index)
                function, err = library.newFunctionWithName_constantValues_error_(program.entry, values, None)
                if function is None:
                    raise pipeline_error(name, "newFunctionWithName", error_text(err))
                state, err = self._device.newComputePipelineStateWithFunction_error_(function, None)
                if state is None:
                    raise pipeline_error(name, "newComputePipelineState", error_text(err))
                check_threads(name, program.local_size, int(state.maxTotalThreadsPerThreadgroup()))
        except PipelineCreationError:
            raise
        except Exception as exc:  # noqa: BLE001 - a pyobjc/Metal failure must not escape as anything else
            raise pipeline_error(name, "pipeline creation", f"{type(exc).__name__}: {exc}") from None
        pipe = MetalPipeline(self, state, program, name, int(num_buffers), int(push_constant_size))
        self._pipelines.add(pipe)
        return pipe

    def launch(self, pipeline, buffers, push_constants, groups):
        """See base.Device.launch: encode one dispatch into the open compute encoder."""
        self._check_open()
        limit = self.info["limits"]["max_workgroup_count"]
        if any(not 0 <= g <= m for g, m in zip(groups, limit)):
            raise DeviceError(f"kernel '{pipeline.name}': groups {tuple(groups)} exceed {limit} (fold into 2-D)")
        push = self._checked_push(pipeline, buffers, push_constants)
        if 0 in groups:
            return
        enc = self._bind(pipeline, buffers, push)
        enc.dispatchThreadgroups_threadsPerThreadgroup_(self._mtl.MTLSizeMake(*groups),
                                                        self._mtl.MTLSizeMake(*pipeline.threads))
        self._recorded += 1

    def launch_indirect(self, pipeline, buffers, push_constants, args, offset):
        """See base.Device.launch_indirect: dispatchThreadgroupsWithIndirectBuffer reads the three counts (an
        MTLDispatchThreadgroupsIndirectArguments) when the dispatch runs; the serial encoder orders it after
        the dispatch that wrote them."""
        self._check_open()
        if offset % 4 or offset + 12 > args.nbytes or getattr(args, "_device", None) is not self or \
                args._mtl is None:
            raise DeviceError(f"kernel '{pipeline.name}': indirect arguments at byte {offset} of {args!r}")
        enc = self._bind(pipeline, buffers, self._checked_push(pipeline, buffers, push_constants))
        enc.dispatchThreadgroupsWithIndirectBuffer_indirectBufferOffset_threadsPerThreadgroup_(
            args._mtl, offset, self._mtl.MTLSizeMake(*pipeline.threads))
        self._recorded += 1

    def _checked_push(self, pipeline, buffers, push_constants):
        """The push-constant bytes of a dispatch, after checking the pipeline and the buffer count."""
        if pipeline._state is None:
            raise DeviceError(f"kernel '{pipeline.name}': pipeline released or its device closed")
        if len(buffers) != pipeline.num_buffers:
            raise DeviceError(f"kernel '{pipeline.name}' binds {pipeline.num_buffers} buffers, got {len(buffers)}")
        push = bytes(push_constants)
        if len(push) > pipeline.push_constant_size or (push and pipeline.program.push_index is None):
            raise DeviceError(f"kernel '{pipeline.name}': {len(push)} bytes of push constants for a pipeline "
                              f"declared with {pipeline.push_constant_size}")
        return push

    def _bind(self, pipeline, buffers, push):
        """The open compute encoder with the pipeline, `buffers` and the push constants set."""
        enc = self._encoder()
        enc.setComputePipelineState_(pipeline._state)
        for index, buf in enumerate(buffers):   # binding k -> [[buffer(k)]] (translate.py checks it)
            if getattr(buf, "_device", None) is not self or buf._mtl is None:
                raise DeviceError(f"launch: {buf!r} is released or belongs to another device")
            enc.setBuffer_offset_atIndex_(buf._mtl, 0, index)
        if pipeline.program.push_index is not None:
            push += bytes(pipeline.push_constant_size - len(push))
            enc.setBytes_length_atIndex_(push, len(push), pipeline.program.push_index)
        return enc
