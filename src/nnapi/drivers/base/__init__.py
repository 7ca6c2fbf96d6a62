"""The driver base: what every driver shares, so a driver writes only its kernels or its compiler and
its cache format (see `device` and `prepared`). Drivers subclass `DriverDevice` and
`DriverPreparedModel`; a third-party driver may too, or implement `nnapi.hal.IDevice` directly.
Compiling drivers also find here their lowering table and claim loop (`lowering`), the bounded native
run (`native`), the registry of verified content (`verified`) and multi-stage compilation (`stages`)."""
from .binding import Binding, loop_timeout, region_length
from .device import CacheWriter, CompileJob, DriverDevice
from .interface import interface_model, io_of
from .job import Claims
from .options import Option, env_flag, env_int, import_with_env, once
from .lowering import Lowering, LoweringTable, prove_in_order, with_dims
from .native import LoopBudgets, NativeCall, raise_failed_check, run_native
from .prepared import DriverBurst, DriverPreparedModel, client_uid, shared_scheduler
from .shared import ClaimMemo, Lru, RuleModules, source_fingerprint
from .stages import Stages
from .verified import VerifiedContent

__all__ = ["Binding", "CacheWriter", "Claims", "CompileJob", "DriverBurst", "DriverDevice", "DriverPreparedModel",
           "Option", "client_uid", "interface_model", "io_of", "env_flag", "env_int", "import_with_env",
           "loop_timeout", "once", "region_length", "shared_scheduler", "ClaimMemo", "Lru", "RuleModules",
           "source_fingerprint", "Lowering", "LoweringTable", "prove_in_order", "with_dims", "LoopBudgets",
           "NativeCall", "raise_failed_check", "run_native", "Stages", "VerifiedContent"]
