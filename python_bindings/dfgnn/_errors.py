"""Exceptions of dfgnn: one class per kind of failure, all deriving from :class:`dfgnn.Error`.

Every failing C API call raises an exception carrying the library's message (dfgnnGetLastErrorMessage),
its status code (:class:`Status`) and the C function. The classes also derive from the built-in
exception a Python user would expect, so ``except ValueError`` catches a malformed graph and
``except OSError`` a missing file:

==========================  ===========================================  =============================
class                       statuses                                     also a
==========================  ===========================================  =============================
InvalidArgumentError        INVALID_ARGUMENT, NULL_POINTER,              ValueError
                            NEGATIVE_SIZE, INDEX_OVERFLOW
GraphError                  ROW_PTR_START, ROW_PTR_DECREASING,           ValueError (InvalidArgumentError)
                            ROW_PTR_END, INDEX_OUT_OF_RANGE,
                            DUPLICATE_EDGE
DTypeError                  wrong array dtype (checked by the binding)   TypeError and ValueError
DeviceError                 array on the wrong device (binding)          ValueError
OutOfMemoryError            OUT_OF_MEMORY                                MemoryError
NoDeviceError               NO_DEVICE                                    RuntimeError
CudaError                   CUDA_ERROR                                   RuntimeError
CompileError                COMPILE_ERROR                                RuntimeError
NotSupportedError           NOT_SUPPORTED                                NotImplementedError
IoError                     IO_ERROR                                     OSError
ParseError                  PARSE_ERROR                                  ValueError
DatabaseError               DATABASE_ERROR                               RuntimeError
InternalError               INTERNAL_ERROR                               RuntimeError
==========================  ===========================================  =============================
"""

import enum


class Status(enum.IntEnum):
    """dfgnn_status_t (runtime/include/dfgnn/dfgnn.h)."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    NULL_POINTER = 2
    NEGATIVE_SIZE = 3
    INDEX_OVERFLOW = 4
    ROW_PTR_START = 5
    ROW_PTR_DECREASING = 6
    ROW_PTR_END = 7
    INDEX_OUT_OF_RANGE = 8
    DUPLICATE_EDGE = 9
    OUT_OF_MEMORY = 10
    NO_DEVICE = 11
    CUDA_ERROR = 12
    COMPILE_ERROR = 13
    NOT_SUPPORTED = 14
    IO_ERROR = 15
    PARSE_ERROR = 16
    DATABASE_ERROR = 17
    INTERNAL_ERROR = 18


class Error(Exception):
    """Base class of every dfgnn error.

    Attributes: ``status`` (:class:`Status`), ``message`` (the C API's message, or the binding's
    for argument checks), ``function`` (the C entry point, e.g. ``"dfgnnGraphCreateCsr"``) and
    ``kind`` ("" for a C API failure; "dtype", "device", "shape", "layout", "type" or "value" for
    a check the Python binding made before calling the library).
    """

    def __init__(self, message, status=Status.INTERNAL_ERROR, function="", kind=""):
        try:
            status = Status(int(status))
        except ValueError:
            pass
        self.status = status
        self.message = message
        self.function = function
        self.kind = kind
        name = status.name if isinstance(status, Status) else f"status {int(status)}"
        # Exception.args holds one string so that OSError and friends format it as-is.
        super().__init__(f"{message} [{name}{' in ' + function if function else ''}]")

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, int(self.status), self.function, self.kind))

    def __str__(self):
        return self.args[0] if self.args else self.message


def _rebuild(cls, message, status, function, kind):
    return cls(message, status, function, kind)


class InvalidArgumentError(Error, ValueError):
    """A bad argument: wrong shape, non-contiguous array, bad size, unknown name, ..."""


class GraphError(InvalidArgumentError):
    """Graph data that fails validation (row_ptr, indices out of range, duplicate edges)."""


class DTypeError(InvalidArgumentError, TypeError):
    """An array of the wrong dtype."""


class DeviceError(InvalidArgumentError):
    """An array in the wrong memory (host vs CUDA, or another GPU than the other arrays)."""


class OutOfMemoryError(Error, MemoryError):
    """A host or device allocation failed."""


class NoDeviceError(Error, RuntimeError):
    """No CUDA driver or device: GPU entry points are unavailable."""


class CudaError(Error, RuntimeError):
    """A CUDA runtime call failed; the message carries CUDA's text."""


class CompileError(Error, RuntimeError):
    """NVRTC failed; the message carries the compiler log."""


class NotSupportedError(Error, NotImplementedError):
    """A valid request that this build or schedule cannot serve."""


class IoError(Error, OSError):
    """A file could not be opened, read or written."""


class ParseError(Error, ValueError):
    """A file or string is malformed; the message names the line."""


class DatabaseError(Error, RuntimeError):
    """The tuning database failed or is unusable."""


class InternalError(Error, RuntimeError):
    """A bug in dfgnn; please report the message."""


_BY_STATUS = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.NULL_POINTER: InvalidArgumentError,
    Status.NEGATIVE_SIZE: InvalidArgumentError,
    Status.INDEX_OVERFLOW: InvalidArgumentError,
    Status.ROW_PTR_START: GraphError,
    Status.ROW_PTR_DECREASING: GraphError,
    Status.ROW_PTR_END: GraphError,
    Status.INDEX_OUT_OF_RANGE: GraphError,
    Status.DUPLICATE_EDGE: GraphError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
    Status.NO_DEVICE: NoDeviceError,
    Status.CUDA_ERROR: CudaError,
    Status.COMPILE_ERROR: CompileError,
    Status.NOT_SUPPORTED: NotSupportedError,
    Status.IO_ERROR: IoError,
    Status.PARSE_ERROR: ParseError,
    Status.DATABASE_ERROR: DatabaseError,
    Status.INTERNAL_ERROR: InternalError,
}

_BY_KIND = {"dtype": DTypeError, "device": DeviceError}


def error_class(status, kind=""):
    """The exception class for a status code (and, for the binding's own checks, a kind)."""
    if kind in _BY_KIND:
        return _BY_KIND[kind]
    try:
        return _BY_STATUS.get(Status(int(status)), Error)
    except ValueError:
        return Error


def make_error(status, function, message, kind=""):
    """Called by the extension module to build the exception of a failing call."""
    return error_class(status, kind)(message, status, function, kind)


def invalid_argument(message, kind="value", function=""):
    """An InvalidArgumentError (or DTypeError / DeviceError by kind) raised by Python-side checks."""
    return make_error(Status.INVALID_ARGUMENT, function, message, kind)
