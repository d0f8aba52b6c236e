"""The one place that knows the pitfalls of the PyPI `vulkan` package (cffi, ABI mode).

Everything else in `spvad.rhi.vulkan` imports `vk`, `ffi`, `lib` and the helpers from here and never
works around the package itself. Importing this module imports `vulkan` (which dlopens libvulkan);
`spvad.rhi` and `spvad.rhi.vulkan` do not import it, so the backend is loaded only when asked for.

Pitfalls handled here (measured, see shared/notes/vulkan-probe/REPORT.md):
- many `vk.VK_*` Python constants are missing, None or wrong: use the cffi enums in `vk.lib`;
- `VK_WHOLE_SIZE` is -1 in Python and overflows uint64 fields: `WHOLE_SIZE` below;
- the result-code -> exception table lacks codes (VALIDATION_FAILED, OUT_OF_POOL_MEMORY has the wrong
  sign, ...), which then surface as `KeyError(code)`: `_patch_result_table()` fills it in;
- exceptions carry no message: `call()` turns them into DeviceError / PipelineCreationError naming the
  function, the result and the driver messages that arrived during the call;
- the package keeps ONE Python debug-utils callback per process (a module global behind one cffi
  trampoline): `_dispatch` is the only callback we ever install and it routes each message to the
  `Collector` whose id travels in `pUserData`;
- exceptions raised inside that callback are swallowed by cffi: the dispatcher never raises, it collects;
- `void*` arguments need `ffi.from_buffer`; mapped memory is an `ffi.buffer` that numpy views zero-copy.
"""
import itertools
import threading

from ...errors import DeviceError, PipelineCreationError
from .loader import import_vulkan, install_hint

try:
    vk = import_vulkan()   # plain `import vulkan`, plus the macOS loader search of loader.py
except (ImportError, OSError) as _exc:  # OSError: package present but the loader library missing
    raise DeviceError(f"vulkan backend unavailable: cannot import the `vulkan` package ({_exc}); "
                      f"{install_hint()}") from _exc

ffi = vk.ffi
lib = vk.lib            # cffi enums here are correct; the Python-level vk.VK_* ones are not always
NULL = ffi.NULL
WHOLE_SIZE = 0xFFFFFFFFFFFFFFFF  # vk.VK_WHOLE_SIZE == -1 overflows uint64; macros are not in vk.lib
VK_FALSE, VK_TRUE = 0, 1

# Debug-utils bits (plain ints, used for filtering and for naming severities).
SEV_WARNING = lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
SEV_ERROR = lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT
TYPE_GENERAL = lib.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
TYPE_VALIDATION = lib.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
TYPE_PERFORMANCE = lib.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT
_SEV_NAMES = {SEV_ERROR: "ERROR", SEV_WARNING: "WARNING",
              lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT: "INFO",
              lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_VERBOSE_BIT_EXT: "VERBOSE"}
_LOADER_ID = "Loader Message"  # the loader's chatter at instance creation; never a finding


def make_version(major, minor, patch=0):
    """VK_MAKE_API_VERSION (variant 0); not reliably present in the Python namespace."""
    return (major << 22) | (minor << 12) | patch


def version_string(v):
    """'1.3.230' from a packed Vulkan version number."""
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


# ---------------------------------------------------------------------------------------------
# Result codes
# ---------------------------------------------------------------------------------------------
# VkResult value -> name, from the cffi enum (complete and correct, unlike the Python table).
RESULT_NAMES = {code: name for code, name in ffi.typeof("VkResult").elements.items()
                if not name.endswith("_MAX_ENUM")}
_CODE_OF_CLASS = {}


def _patch_result_table():
    """Give every VkResult an exception class in the package's table, so that no call raises
    KeyError(code), and remember each class's true code so errors can name the result."""
    table = vk._vulkan.exception_codes
    for code, name in sorted(RESULT_NAMES.items()):
        if code == 0:
            continue
        cls = table.get(code)
        if cls is None:
            # VK_ERROR_OUT_OF_POOL_MEMORY -> VkErrorOutOfPoolMemory: reuse the package's class when it
            # exists (it may sit under a wrong-signed key), else create one with the right base.
            cls_name = "Vk" + "".join(p.capitalize() for p in name[3:].split("_"))
            cls = getattr(vk, cls_name, None)
            base = vk.VkError if code < 0 else vk.VkException
            if not (isinstance(cls, type) and issubclass(cls, base)):
                cls = type(cls_name, (base,), {})
            table[code] = cls
        _CODE_OF_CLASS.setdefault(cls, code)


_patch_result_table()

# Everything a package wrapper may raise for a failed call.
VK_ERRORS = (vk.VkError, vk.VkException, KeyError, vk.ProcedureNotFoundError,
             vk.ExtensionNotSupportedError)


def result_of(exc):
    """(code, name) of a failed call's exception; code is None when unknown."""
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    else:
        code = _CODE_OF_CLASS.get(type(exc))
    name = RESULT_NAMES.get(code, type(exc).__name__)
    return code, name


def result_name(code):
    """Name of a raw VkResult integer (for calls made directly through `lib`)."""
    return RESULT_NAMES.get(code, f"VkResult({code})")


# ---------------------------------------------------------------------------------------------
# Debug-utils messages: one process-wide callback, routed by pUserData to per-device collectors
# ---------------------------------------------------------------------------------------------
class Collector:
    """Messages of one device (severity, types, message id, text), in arrival order. The callback may run
    on any thread, a driver's own included, and concurrently (Vulkan allows it): a lock keeps a message
    arriving between a take's read and its removal from being lost."""

    def __init__(self):
        self.messages = []
        self.lock = threading.Lock()
        self.id = next(_ids)
        _collectors[self.id] = self

    def add(self, message):
        with self.lock:
            self.messages.append(message)

    def mark(self):
        """Position to pass to take_since() after a call whose messages belong to its error."""
        with self.lock:
            return len(self.messages)

    def take_since(self, mark):
        """Remove and return the messages that arrived after `mark` (they go into an exception)."""
        with self.lock:
            taken = self.messages[mark:]
            del self.messages[mark:]
        return [format_message(m) for m in taken]

    def take_findings(self):
        """Remove all messages; return the WARNING/ERROR ones that are not loader chatter."""
        with self.lock:
            taken, self.messages = self.messages, []
        return [format_message(m) for m in taken
                if m[0] & (SEV_WARNING | SEV_ERROR) and m[2] != _LOADER_ID]

    def detach(self):
        """Stop routing to this collector (after the instance that reports to it is destroyed)."""
        _collectors.pop(self.id, None)


_ids = itertools.count(1)   # starts at 1: the package drops falsy kwargs, so pUserData=0 would vanish
_collectors = {}


def format_message(m):
    severity, _types, ident, text = m
    sev = _SEV_NAMES.get(severity, hex(severity))
    return f"[{sev}] {ident}: {text}" if ident else f"[{sev}] {text}"


def _dispatch(severity, types, data, user_data):
    """The only debug-utils callback in the process. Never raises (cffi would swallow it anyway and
    return 0 to the layer); always returns VK_FALSE so the layer does not abort the call."""
    try:
        collector = _collectors.get(int(ffi.cast("uintptr_t", user_data)))
        if collector is None:
            return VK_FALSE
        ident = ffi.string(data.pMessageIdName).decode(errors="replace") \
            if data.pMessageIdName != NULL else ""
        if ident == _LOADER_ID and severity < SEV_ERROR:
            return VK_FALSE  # loader INFO/WARNING chatter (e.g. about VK_INSTANCE_LAYERS)
        text = ffi.string(data.pMessage).decode(errors="replace") if data.pMessage != NULL else ""
        collector.add((severity, types, ident, text))
    except BaseException:  # noqa: BLE001 - nothing may escape into the driver
        pass
    return VK_FALSE


def messenger_info(collector, severities, types, pnext=None):
    """A VkDebugUtilsMessengerCreateInfoEXT routed to `collector`. Building it (re)installs
    `_dispatch` as the package's single callback. Keep the returned struct alive while it is used."""
    return vk.VkDebugUtilsMessengerCreateInfoEXT(
        pNext=pnext, messageSeverity=severities, messageType=types,
        pfnUserCallback=_dispatch, pUserData=collector.id)


# ---------------------------------------------------------------------------------------------
# Calls that turn the package's bare exceptions into spvad errors
# ---------------------------------------------------------------------------------------------
def failure_text(fn_name, exc, messages, context=""):
    code, name = result_of(exc)
    text = f"{context}{fn_name} failed with {name}" + (f" ({code})" if code is not None else "")
    if messages:
        text += "; driver/validation messages:\n  " + "\n  ".join(messages)
    return text


def call(fn, *args, collector=None, error=DeviceError, context=""):
    """fn(*args), raising `error` with the function name, the result name and the messages the
    collector received during the call (those are removed from the collector: the error owns them)."""
    mark = collector.mark() if collector is not None else 0
    try:
        return fn(*args)
    except VK_ERRORS as exc:
        msgs = collector.take_since(mark) if collector is not None else []
        raise error(failure_text(getattr(fn, "__name__", str(fn)), exc, msgs, context)) from None


def check(result, fn_name, context=""):
    """Raise DeviceError for a raw VkResult < 0 returned by a direct `lib` call."""
    if result < 0:
        raise DeviceError(f"{context}{fn_name} failed with {result_name(result)} ({result})")
    return result


def enumerate_names(items, attr):
    """Names from an enumeration result (the package returns StrWrap-decoded strings)."""
    return {getattr(i, attr) for i in items}


__all__ = ["vk", "ffi", "lib", "NULL", "WHOLE_SIZE", "Collector", "call", "check", "messenger_info",
           "result_of", "result_name", "PipelineCreationError", "DeviceError"]
