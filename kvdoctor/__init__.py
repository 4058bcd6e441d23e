"""kvdoctor: diagnose how an inference server keeps a request's KV-cache state alive.

The error tree lives in ``kvdoctor._exceptions`` (one module, as httpx keeps it); its public names
are re-exported here, so ``except kvdoctor.InputError`` works without knowing the private layout.
"""

from kvdoctor._exceptions import (
    ConfigError,
    DeploymentError,
    DownloadError,
    EngineFinding,
    EngineRefuses,
    EngineUnavailable,
    EvalTimeout,
    FlagError,
    ForeignServer,
    GateFailure,
    InputError,
    InternalError,
    Interrupted,
    KvdoctorError,
    NotRunnableHere,
    RequestFailed,
    ServerExited,
    ServerUnhealthy,
    UnknownModelError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DeploymentError",
    "DownloadError",
    "EngineFinding",
    "EngineRefuses",
    "EngineUnavailable",
    "EvalTimeout",
    "FlagError",
    "ForeignServer",
    "GateFailure",
    "InputError",
    "InternalError",
    "Interrupted",
    "KvdoctorError",
    "NotRunnableHere",
    "RequestFailed",
    "ServerExited",
    "ServerUnhealthy",
    "UnknownModelError",
    "__version__",
]
