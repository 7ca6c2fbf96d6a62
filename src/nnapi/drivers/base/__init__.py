"""The driver base: what every driver shares, so a driver writes only its kernels or its compiler and
its cache format (see `device` and `prepared`). Drivers subclass `DriverDevice` and
`DriverPreparedModel`; a third-party driver may too, or implement `nnapi.hal.IDevice` directly.
Compiling drivers also find here their lowering table and claim loop (`lowering`), the bounded native
run (`native`), the registry of verified content (`verified`) and multi-stage compilation (`stages`)."""
from ...lazy import exports

#: Each export and the submodule that defines it, imported on first use (`nnapi.lazy`): listing the
#: devices imports a driver's class and what describing it needs, not its compile- and run-time modules.
_EXPORTS = {
    "Binding": ".binding",
    "loop_timeout": ".binding",
    "region_length": ".binding",
    "CacheWriter": ".device",
    "CompileJob": ".device",
    "DriverDevice": ".device",
    "interface_model": ".interface",
    "io_of": ".interface",
    "Claims": ".job",
    "Option": ".options",
    "env_flag": ".options",
    "env_int": ".options",
    "import_with_env": ".options",
    "once": ".options",
    "Lowering": ".lowering",
    "LoweringTable": ".lowering",
    "prove_in_order": ".lowering",
    "with_dims": ".lowering",
    "LoopBudgets": ".native",
    "NativeCall": ".native",
    "raise_failed_check": ".native",
    "run_native": ".native",
    "DriverBurst": ".prepared",
    "DriverPreparedModel": ".prepared",
    "client_uid": ".prepared",
    "shared_scheduler": ".prepared",
    "ClaimMemo": ".shared",
    "Lru": ".shared",
    "RuleModules": ".shared",
    "source_fingerprint": ".shared",
    "Stages": ".stages",
    "VerifiedContent": ".verified",
}
__getattr__ = exports(__name__, _EXPORTS)

__all__ = ["Binding", "CacheWriter", "Claims", "CompileJob", "DriverBurst", "DriverDevice", "DriverPreparedModel",
           "Option", "client_uid", "interface_model", "io_of", "env_flag", "env_int", "import_with_env",
           "loop_timeout", "once", "region_length", "shared_scheduler", "ClaimMemo", "Lru", "RuleModules",
           "source_fingerprint", "Lowering", "LoweringTable", "prove_in_order", "with_dims", "LoopBudgets",
           "NativeCall", "raise_failed_check", "run_native", "Stages", "VerifiedContent"]
