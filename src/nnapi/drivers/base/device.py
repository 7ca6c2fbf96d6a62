"""The device half of the driver base: what every driver's IDevice does the same way.

A driver subclasses `DriverDevice`, names itself (`NAME`, `CACHE_FILES`, `DEVICE_TYPE`) and fills in
`driver_version`, `capabilities`, `supported`, `compile`, and, if it caches, `save` / `load`. The base
does the rest: validation, the unsupported-operation refusal, the memory limit, preparation through
the `qos` scheduler (refused when the deadline cannot be met, abandoned when it passes), cache save
and load through `nnapi.caching` (the driver's `load` only ever sees verified bytes), the caching
engine (C12) for compilations without cache information, and memory domains.

Settings come from keywords or, per driver, the environment: `NNAPI_<NAME>_MEMORY_LIMIT` (bytes),
`NNAPI_<NAME>_WORKERS` (scheduler slots), `NNAPI_<NAME>_ENGINE=1` (the caching engine).
"""
from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Callable, ClassVar

from ..._version import __version__
from ...caching import (CachingEngine, IntegrityRegistry, load_artifacts, model_fingerprint, save_artifacts,
                        state_dir)
from ...hal import (BufferDesc, BufferRole, CacheHandles, Capabilities, ClientId, DeviceInfo, DeviceType,
                    ErrorStatus, ExecutionPreference, IDevice, Model, NnError, Priority)
from ...memory import mappable_constant_flags, max_tensor_bytes
from ...memory.domains import DriverDomain
from ...qos import Scheduler, estimate_peak_bytes, normalize_deadline, threads
from .job import (CacheWriter, Claims, CompileJob, close_handles, dup_handles, handles_empty,
                  within_deadline)
from .options import Option, Options, env_flag, env_int
from .prepared import DriverPreparedModel, client_uid
from .shared import ClaimMemo, Lru, cpu_features, package_release, source_fingerprint
from .verified import VerifiedContent, content_of

if TYPE_CHECKING:
    from ...caching.fleet import Fleet

log = logging.getLogger("nnapi.drivers")


_domains_lock = threading.Lock()
_domains: dict[type, DriverDomain] = {}


class DriverDevice(IDevice):
    """The shared IDevice; see the module doc for what a driver fills in."""

    NAME: ClassVar[str] = ""
    #: (model-cache files, data-cache files); (0, 0): the driver does not cache.
    CACHE_FILES: ClassVar[tuple[int, int]] = (1, 1)
    DEVICE_TYPE: ClassVar[DeviceType] = DeviceType.CPU
    FEATURE_LEVEL: ClassVar[int] = 30
    #: Remember claims across processes too (for drivers whose `supported` is expensive).
    REMEMBER_CLAIMS: ClassVar[bool] = False
    #: How long work started on a slot lent by lower-priority work waits for it to pause (`qos.Scheduler`):
    #: worth it where both would fight for the interpreter lock; 0 where work runs natively.
    HANDOFF_NS: ClassVar[int] = 2_000_000

    #: The driver's own settings by keyword (`base.options`: each also read from its environment variable),
    #: and what the calibration twin sets on top of the device's own (`calibration_twin`).
    OPTIONS: ClassVar[dict[str, Option]] = {}
    CALIBRATION_OPTIONS: ClassVar[dict[str, object]] = {}
    #: The capabilities are measured (`calibrated_capabilities`) for these operand types (None: float,
    #: int32 and bool ones) unless the driver writes `capabilities`; False: the driver must write it.
    CALIBRATED: ClassVar[bool] = False
    CALIBRATED_TYPES: ClassVar[tuple | None] = None

    def __init__(self, *, scheduler: Scheduler | None = None, workers: int | None = None, queue_capacity: int = 256,
                 memory_limit_bytes: int | None = None, engine: bool | None = None, **options: object) -> None:
        #: The values of OPTIONS this device was made with (`option` reads them).
        self.options = Options(type(self).__name__, self.OPTIONS, options)
        prefix = f"NNAPI_{self.NAME.upper()}_"
        self.memory_limit_bytes = memory_limit_bytes if memory_limit_bytes is not None else env_int(
            prefix + "MEMORY_LIMIT")
        self.scheduler = scheduler if scheduler is not None else Scheduler(
            workers if workers is not None else env_int(prefix + "WORKERS"), queue_capacity, name=self.NAME,
            handoff_ns=self.HANDOFF_NS)
        self._use_engine = env_flag(prefix + "ENGINE") if engine is None else engine
        self._version: str | None = None
        self._registry: IntegrityRegistry | None = None
        self._engine: CachingEngine | None = None
        self._capabilities: Capabilities | None = None
        self._warned_state = False
        self._fleet: "Fleet | None | bool" = False  # (not looked up yet)
        self._claim_memo: Lru[list[bool]] = Lru(256)
        self._claim_store: ClaimMemo | None = None
        self._compile_ns_per_op: float | None = None  # the fastest compile seen per operation (LEARN_COMPILE_NS)
        self._analysis: tuple[bytes, object] | None = None  # (model fingerprint, what `supported` left for compile)
        self._analysis_lock = threading.Lock()

    #: `estimate_compile_ns` learns from the compiles seen: half the fastest per operation, times the
    #: operations (0 before any compile).
    LEARN_COMPILE_NS: ClassVar[bool] = False
    #: The package folders (relative to `nnapi`) whose code decides what the driver claims and compiles:
    #: their fingerprint is part of the version (an edited checkout is a new driver version, C9).
    VERSION_SOURCES: ClassVar[tuple[str, ...]] = ()
    #: {name in the version: installed package} whose releases the compiled code depends on.
    VERSION_PACKAGES: ClassVar[dict[str, str]] = {}
    #: The compiled code depends on this CPU's model and instruction set (its features are in the version).
    CPU_SPECIFIC: ClassVar[bool] = False
    #: The driver its calibration measures against (`nnapi.drivers` entry point; see `calibrated_capabilities`).
    CALIBRATION_BASELINE: ClassVar[str] = "reference"

    # --- what a driver fills in ---------------------------------------------------------------------
    def driver_version(self) -> str:
        """The version string: a new one never trusts caches an older one wrote (C9). By default the
        package's version, then the VERSION_PACKAGES' releases, `version_parts`, the CPU's features
        (CPU_SPECIFIC) and the fingerprint of VERSION_SOURCES."""
        parts = [__version__, *(f"{k}{package_release(p)}" for k, p in self.VERSION_PACKAGES.items()),
                 *(f"{k}{v}" for k, v in self.version_parts().items())]
        if self.CPU_SPECIFIC:
            parts.append(f"cpu{cpu_features()}")
        if self.VERSION_SOURCES:
            parts.append(f"src{source_fingerprint(*self.VERSION_SOURCES)}")
        return "+".join(parts)

    def version_parts(self) -> dict[str, str]:
        """What else the compiled code depends on (the backend library's version, the CPU), by name."""
        return {}

    def option(self, name: str) -> object:
        """One of OPTIONS: the keyword's value, else its environment variable's, else its default."""
        return self.options[name]

    def device_type(self) -> DeviceType:
        """What the device is (`get_info`; its calibration is stored per type): DEVICE_TYPE by default."""
        return self.DEVICE_TYPE

    def capabilities(self) -> Capabilities:
        """Measured when CALIBRATED (`calibrated_capabilities` for CALIBRATED_TYPES); else the driver's own."""
        if not self.CALIBRATED:
            raise NotImplementedError(f"{type(self).__name__}: write capabilities() or set CALIBRATED")
        return self.calibrated_capabilities(self.CALIBRATED_TYPES)

    def supported(self, model: Model) -> "list[bool] | Claims":
        """One flag per operation of the (already validated) model's main graph; a `Claims` also hands
        what the analysis found to the `compile` of the same model (`CompileJob.analysis`)."""
        raise NotImplementedError

    def compile(self, job: CompileJob) -> DriverPreparedModel:
        """Prepare `job.model`; call `job.checkpoint()` between units of work."""
        raise NotImplementedError

    def save(self, prepared: DriverPreparedModel) -> tuple[list[bytes], list[bytes]]:
        """The model-cache and data-cache blobs of a prepared model (CACHE_FILES of each)."""
        raise NotImplementedError

    def saved(self, prepared: DriverPreparedModel, digest: bytes, uid: int) -> None:
        """`prepared` was written to app `uid`'s cache as the content the registry knows by `digest`:
        a driver may share what `prepared` holds with later loads of it (`CompileJob.verified`)."""

    def holds(self, job: CompileJob, digest: bytes) -> bool:
        """Whether the driver still holds the data blobs of the verified content `digest` names, as app
        `job.uid` loaded or saved them (kept on `job.held`): its data cache files are then not read
        again, and `load` gets None for them. By default: what the driver offered `content.hold`."""
        job.held = self.content.held(digest, job.uid)
        return job.held is not None

    def load(self, model_blobs: list[memoryview], data_blobs: list[memoryview] | None, job: CompileJob
             ) -> DriverPreparedModel:
        """A prepared model from verified cache blobs (its preference and priority come with them);
        `data_blobs` is None when `holds` said the driver has them (`job.held`)."""
        raise NotImplementedError

    def calibration_twin(self) -> "DriverDevice":
        """The device as it runs in the steady state, which the calibration times (by default one with
        this device's options and CALIBRATION_OPTIONS, without the caching engine, on the same scheduler)."""
        return type(self)(**{**self.options.given, **self.CALIBRATION_OPTIONS}, engine=False,
                          scheduler=self.scheduler)

    def calibration_variant(self) -> str:
        """Which backend the stored calibration is for (a GPU measures apart from the CPU): the device
        type's name by default."""
        return "cpu" if self.device_type() == DeviceType.CPU else self.device_type().name.lower()

    def calibrated_capabilities(self, types=None) -> Capabilities:
        """Capabilities measured against the CALIBRATION_BASELINE driver's twin (`base.calibration`: stored
        in the state directory) for the operand `types` (default: float, int32 and bool ones);
        NNAPI_<NAME>_PERFORMANCE overrides the measurement."""
        from . import calibration
        return calibration.capabilities(self, self.calibration_twin, self.calibration_baseline,
                                        variant=self.calibration_variant(), types=types)

    def calibration_baseline(self) -> "DriverDevice":
        """The baseline's steady twin, found through the `nnapi.drivers` entry points (the base imports
        no driver)."""
        from ...installed import entry_points
        found = [ep for ep in entry_points("nnapi.drivers") if ep.name == self.CALIBRATION_BASELINE]
        if not found:
            raise LookupError(f"no {self.CALIBRATION_BASELINE!r} driver to calibrate against")
        return found[0].load()().calibration_twin()

    def estimate_compile_ns(self, model: Model) -> int:
        """A lower bound of `compile`'s duration (admission: refused when even this misses the deadline);
        by default 0, or learnt (LEARN_COMPILE_NS)."""
        per_op = self._compile_ns_per_op
        return 0 if per_op is None else int(per_op * len(model.main.operations) / 2)

    def estimate_run_ns(self, prepared: DriverPreparedModel) -> int:
        """A lower bound of one execution of `prepared` before any has run (admission, Q6): by default
        the prepared model's own `estimate_run_ns`."""
        return prepared.estimate_run_ns()

    def estimate_peak_bytes(self, model: Model) -> int:
        """Memory the model needs at least (constants and live tensors), checked against the limit."""
        return estimate_peak_bytes(model)

    # --- state ---------------------------------------------------------------------------------------
    @property
    def version(self) -> str:
        if self._version is None:
            self._version = self.driver_version()
        return self._version

    @property
    def registry(self) -> IntegrityRegistry:
        if self._registry is None:
            self._registry = IntegrityRegistry(self.NAME, self.version)
        return self._registry

    @registry.setter
    def registry(self, registry: IntegrityRegistry) -> None:
        self._registry = registry

    @property
    def fleet(self) -> "Fleet | None":
        """The fleet tier `NNAPI_FLEET` names (`caching.fleet`), looked up once; None without one."""
        if self._fleet is False:
            from ...caching.fleet import Fleet
            self._fleet = Fleet.from_env() if os.environ.get("NNAPI_FLEET") else None
        return self._fleet

    @fleet.setter
    def fleet(self, fleet: "Fleet | None") -> None:
        self._fleet = fleet

    @property
    def engine(self) -> CachingEngine | None:
        """The caching engine (C12) when turned on, else None."""
        if self._use_engine and self._engine is None:
            self._engine = CachingEngine(self.NAME, self.version)
        return self._engine

    @classmethod
    def shared_domain(cls) -> DriverDomain:
        """The memory domain of every device of this driver class in this process: tokens are unique
        among the live buffers of all of them."""
        with _domains_lock:
            domain = _domains.get(cls)
            if domain is None:
                domain = _domains[cls] = DriverDomain(owns=lambda m: getattr(m, "domain", None) is domain)
            return domain

    @property
    def domain(self) -> DriverDomain:
        return self.shared_domain()

    @property
    def content(self) -> VerifiedContent:
        """What verified cache content decoded to, in this process, for every device of this driver
        class (`base.verified`): reused by later loads of the same digest."""
        return content_of(type(self))

    def tensor_limit_bytes(self) -> int:
        """The most bytes one tensor computed at run time may take: the memory limit, else
        `memory.max_tensor_bytes()` (a quarter of the machine's memory)."""
        return self.memory_limit_bytes if self.memory_limit_bytes is not None else max_tensor_bytes()

    # --- IDevice -------------------------------------------------------------------------------------
    def get_info(self) -> DeviceInfo:
        return DeviceInfo(self.NAME, self.version, self.device_type(), self.FEATURE_LEVEL)

    def get_capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self.capabilities()
        return self._capabilities

    def get_supported_operations(self, model: Model) -> list[bool]:
        """Validation and `supported`, remembered by the model's content fingerprint: in this process
        for every driver, across processes too with REMEMBER_CLAIMS (the same bytes were validated and
        claimed before, so a compilation from a cache skips both)."""
        flags = self._claims(model)[0]
        mappable = mappable_constant_flags(model)  # M5: a constant whose handle cannot be mapped is unsupported
        return [f and ok for f, ok in zip(flags, mappable)]

    def _claims(self, model: Model, deadline: int | None = None) -> tuple[list[bool], bytes | None]:
        """(`supported` of a validated model, its content fingerprint): INVALID_ARGUMENT when it is not
        valid; remembered; a `Claims`' analysis is kept for the next `compile` of the same content. With
        a `deadline`, `supported` runs on a worker thread that is not waited for past it."""
        try:
            key = model_fingerprint(model)
        except Exception:  # malformed: validation names the fault
            key = None
        n = len(model.main.operations) if isinstance(model, Model) else 0
        if key is not None:
            flags = self._claim_memo.get(key)
            if flags is None and self.REMEMBER_CLAIMS:
                flags = self.claim_store.get(key)  # answered in an earlier process
            if flags is None and self.fleet is not None:
                flags = self.fleet.claims(self.NAME, self.version, key.hex(), n)  # answered on a trusted host
                if flags is not None and self.REMEMBER_CLAIMS:
                    self.claim_store.put(key, flags)
            if flags is not None and len(flags) == n:
                self._claim_memo.put(key, flags)
            if flags is not None and len(flags) == n:
                return list(flags), key
        from ...validation import validate_model  # (imported with the first model: a cached start has none)
        validate_model(model)
        try:
            answer = self.supported(model) if deadline is None else within_deadline(
                deadline, lambda: self.supported(model), f"{self.NAME} preparation",
                what="the claim analysis was not waited for")
            flags = [bool(f) for f in answer]
        except NnError:
            raise
        except Exception as e:  # a claim analysis that fails claims nothing, and is not remembered
            log.log(logging.DEBUG if isinstance(e, threads.ProcessExiting) else logging.WARNING,
                    "%s: claim analysis failed, nothing claimed: %s: %s", self.NAME, type(e).__name__, e)
            return [False] * n, None
        if len(flags) != n:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{self.NAME}: supported() gave {len(flags)} flags for "
                                                       f"{n} operations")
        if key is not None:
            self._claim_memo.put(key, flags)
            if self.REMEMBER_CLAIMS:
                self.claim_store.put(key, flags)
            if self.fleet is not None:
                self.fleet.publish_claims(self.NAME, self.version, key.hex(), flags)
            if isinstance(answer, Claims):  # one entry: it may reference the caller's constant memory
                with self._analysis_lock:
                    self._analysis = (key, answer.analysis)
        return list(flags), key

    def _take_analysis(self, key: bytes | None) -> object:
        """What `supported` left for the model whose fingerprint is `key`, once (None: nothing)."""
        with self._analysis_lock:
            last, self._analysis = self._analysis, None
        return last[1] if last is not None and key is not None and last[0] == key else None

    @property
    def claim_store(self) -> ClaimMemo:
        """The claims remembered across processes (REMEMBER_CLAIMS)."""
        if self._claim_store is None:
            self._claim_store = ClaimMemo(self.NAME, self.version)
        return self._claim_store

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return self.CACHE_FILES

    def prepare_model(self, model: Model, preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: int | None = None,
                      cache_handles: CacheHandles | None = None, token: bytes | None = None, *,
                      client: ClientId | None = None) -> DriverPreparedModel:
        # Validates the model (or its very content was validated before); a claim analysis that outlasts the
        # deadline returns at it (MISSED_DEADLINE_TRANSIENT), as a compile does.
        claims, key = self._claims(model, normalize_deadline(deadline))
        from ...validation import validate_preference, validate_priority
        validate_preference(preference)
        validate_priority(priority)
        preference, priority = ExecutionPreference(preference), Priority(priority)
        unsupported = [f"{i} ({op.type.name})" for i, (op, ok) in enumerate(zip(model.main.operations, claims))
                       if not ok]
        if unsupported:
            raise NnError(ErrorStatus.INVALID_ARGUMENT,
                          f"the {self.NAME} driver does not support operations {', '.join(unsupported)}")
        self._check_memory(model)
        uid = client_uid(client)
        has_cache = (self.CACHE_FILES != (0, 0) and cache_handles is not None and token is not None
                     and bool(cache_handles.model_cache or cache_handles.data_cache))
        saved = None
        if has_cache:
            try:
                saved = dup_handles(cache_handles)  # the caller may close its fds once we return
            except (OSError, TypeError) as e:  # bad handles only mean no cache (never a failed preparation)
                log.info("%s: cache handles unusable, compiling without caching: %s", self.NAME, e)
                has_cache = False
        try:
            token = bytes(token) if has_cache else None
            job = CompileJob(model, preference, priority, normalize_deadline(deadline),
                             self._cache_writer(saved, token, uid) if has_cache else None, uid=uid,
                             analysis=self._take_analysis(key))
            ticket = self.scheduler.submit(client=uid, priority=priority, deadline=job.deadline,
                                           lower_ns=self.estimate_compile_ns(model), label=f"{self.NAME} preparation")
            prepared = self._on_ticket(ticket, job, lambda: self._compile(job, saved, token))
        finally:
            if saved is not None:
                close_handles(saved)
        prepared.bind(self, uid)
        return prepared

    def prepare_model_from_cache(self, deadline: int | None, cache_handles: CacheHandles, token: bytes, *,
                                 client: ClientId | None = None) -> DriverPreparedModel:
        if self.CACHE_FILES == (0, 0):
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"the {self.NAME} driver does not cache compilations")
        uid = client_uid(client)
        # The priority comes with the cache (Q2): the preparation itself queues at the default.
        job = CompileJob(None, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, normalize_deadline(deadline),
                         self._cache_writer(cache_handles, bytes(token), uid), uid=uid)
        ticket = self.scheduler.submit(client=uid, priority=Priority.MEDIUM, deadline=job.deadline,
                                       label=f"{self.NAME} preparation from cache")
        prepared = self._on_ticket(ticket, job, lambda: self._load_cache(job, cache_handles, token))
        self._check_memory(prepared.model)
        prepared.bind(self, uid)
        return prepared

    def allocate(self, desc: BufferDesc, prepared_models, input_roles: list[BufferRole],
                 output_roles: list[BufferRole]):
        """A driver-managed buffer (memory domains, M6-M12) for the roles: IBuffer and token."""
        return self.domain.allocate(desc, prepared_models, input_roles, output_roles)

    # --- preparation machinery ------------------------------------------------------------------------
    def _cache_writer(self, handles: CacheHandles, token: bytes, uid: int) -> Callable[[], CacheWriter]:
        """What `CompileJob.keep_cache` calls: duplicates the (still open) handles into a writer."""
        def make() -> CacheWriter:
            dups = dup_handles(handles)
            return CacheWriter(lambda prepared: self._save(dups, token, prepared, uid), dups)
        return make

    def _check_memory(self, model: Model) -> None:
        if self.memory_limit_bytes is None:
            return
        peak = self.estimate_peak_bytes(model)
        if peak > self.memory_limit_bytes:
            raise NnError(ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
                          f"the model needs at least {peak} bytes at its peak (constants and live tensors), "
                          f"more than the {self.NAME} driver's limit of {self.memory_limit_bytes} bytes")

    def _on_ticket(self, ticket, job: CompileJob, fn: Callable[[], DriverPreparedModel]) -> DriverPreparedModel:
        """Run preparation work on a scheduler slot. With a deadline it runs on a worker thread that is
        abandoned when the deadline passes (MISSED_DEADLINE_TRANSIENT: control returns at the deadline
        even while a native compile cannot be interrupted; its next checkpoint stops it)."""
        if job.deadline is None:
            return ticket.run(fn)
        return ticket.run(lambda: within_deadline(job.deadline, fn, f"{self.NAME} preparation", job.abort,
                                                  "the compilation was abandoned"))

    def _compile(self, job: CompileJob, handles: CacheHandles | None, token: bytes | None) -> DriverPreparedModel:
        """Compile, through the caching engine when there is no cache information, and write the cache."""
        engine_key = None
        if handles is None and self._use_engine and self._state_usable():
            engine_key = self._engine_key(job.model, job.preference)
            prepared = self._engine_get(engine_key, job)
            if prepared is not None:
                return prepared
            job.set_writer(lambda: CacheWriter(lambda p: self._engine_put(engine_key, p)))
        refused = None
        if handles is not None and self.fleet is not None and handles_empty(handles):  # (C3: nothing cached here yet)
            prepared, refused = self._from_fleet(job, handles, token)
            if prepared is not None:
                return prepared
        started = time.monotonic_ns()
        try:
            prepared = self.compile(job)
        except (NnError, threads.ProcessExiting):
            raise
        except Exception as e:  # a driver's own failure reaches the app as an NNAPI error, never unwrapped
            raise NnError(ErrorStatus.GENERAL_FAILURE,
                          f"{self.NAME} compilation failed: {type(e).__name__}: {e}") from None
        if self.LEARN_COMPILE_NS:
            per_op = (time.monotonic_ns() - started) / max(1, len(job.model.main.operations))
            self._compile_ns_per_op = min(per_op, self._compile_ns_per_op or per_op)
        if refused is not None:
            prepared.cache_source = f"fleet entry refused: {refused}"
        if job.aborted:
            return prepared
        if handles is not None and not job.deferred:
            self._save(handles, token, prepared, job.uid)
        elif engine_key is not None and not job.deferred:
            self._engine_put(engine_key, prepared)
        return prepared

    def _state_usable(self) -> bool:
        """Whether the state directory (integrity registry, engine) can be used; when it cannot, caching
        is off with one warning, and the device keeps working."""
        try:
            state_dir()
            return True
        except OSError as e:
            if not self._warned_state:
                self._warned_state = True
                log.warning("%s: state directory unusable (%s): compilation caching is off", self.NAME, e)
            return False

    def _from_fleet(self, job: CompileJob, handles: CacheHandles,
                    token: bytes) -> tuple[DriverPreparedModel | None, str | None]:
        """Prepare from the fleet's verified artifact (`caching.fleet`: signature, hashes, version), written
        into the app's cache files and recorded in this driver's registry first, so the next start is a
        local hit; (None, why not) when there is none or it is refused."""
        from ...caching.fleet import Refused
        try:
            model_blobs, data_blobs, signer = self.fleet.fetch(self.NAME, self.version, token, self.CACHE_FILES)
        except Refused as e:
            log.info("%s: no fleet artifact used: %s", self.NAME, e)
            return None, str(e)
        try:  # recorded and written first; then loaded from the very bytes the fleet's hashes verified
            job.verified = save_artifacts(handles, token, self.registry, self.CACHE_FILES, model_blobs, data_blobs,
                                          uid=job.uid)
            prepared = self.load([memoryview(b) for b in model_blobs], [memoryview(b) for b in data_blobs], job)
        except NnError as e:
            if e.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT):
                raise
            return None, f"the verified artifact cannot be used: {e.message}"
        except Exception as e:  # (the artifact verified, but this driver cannot load it: compile instead)
            return None, f"the verified artifact cannot be loaded: {type(e).__name__}: {e}"
        prepared.cache_source = f"fleet: signed by {signer}"
        log.info("%s: prepared from the fleet's artifact signed by %s", self.NAME, signer)
        return prepared, None

    def _save(self, handles: CacheHandles, token: bytes, prepared: DriverPreparedModel, uid: int) -> None:
        """Write the cache (record and files under one exclusive lock), and publish it to the fleet when
        this host signs; failing only means no cache."""
        if not self._state_usable():
            return
        try:
            blobs = self.save(prepared)
            digest = save_artifacts(handles, token, self.registry, self.CACHE_FILES, *blobs, uid=uid)
        except OSError as e:  # a full disk, unwritable files: the partial files were emptied
            log.warning("%s: compilation not cached, its cache files could not be written: %s", self.NAME,
                        e.strerror or e)
            return
        except Exception as e:  # e.g. an unusable state directory, an unserializable program
            log.info("%s: compilation not cached: %s: %s", self.NAME, type(e).__name__, e)
            return
        self.saved(prepared, digest, uid)
        if self.fleet is not None and not (prepared.cache_source or "").startswith("fleet:"):
            self.fleet.publish(self.NAME, self.version, token, *blobs)

    def _load_cache(self, job: CompileJob, handles: CacheHandles, token: bytes) -> DriverPreparedModel:
        if not self._state_usable():
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"{self.NAME}: caching is off (no usable state directory)")
        try:
            model_blobs, data_blobs, job.verified = load_artifacts(handles, token, self.registry, self.CACHE_FILES,
                                                                   lambda digest: self.holds(job, digest), job.uid,
                                                                   job.deadline)
        except NnError:
            raise
        except (sqlite3.Error, OSError) as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"integrity registry unavailable: {e}") from None
        try:
            return self.load(model_blobs, data_blobs, job)
        except NnError as e:
            if e.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT):
                raise
            raise NnError(ErrorStatus.GENERAL_FAILURE, f"cached model cannot be loaded: {e.message}") from None
        except Exception as e:
            raise NnError(ErrorStatus.GENERAL_FAILURE,
                          f"cached model cannot be loaded: {type(e).__name__}: {e}") from None

    # --- the caching engine (C12) ----------------------------------------------------------------------
    def _engine_key(self, model: Model, preference: ExecutionPreference) -> str:
        return CachingEngine.key_for(model_fingerprint(model), bytes([int(preference)]), self.NAME.encode())

    def _engine_get(self, key: str, job: CompileJob) -> DriverPreparedModel | None:
        """The prepared model the engine holds for `key` (None on a miss or an unusable entry)."""
        try:
            hit = self.engine.get(key)  # integrity-checked against the engine's SHA-256 index
            if hit is None:
                return None
            job.set_writer(lambda: CacheWriter(lambda p: self._engine_put(key, p)))
            prepared = self.load(*hit, job)
        except Exception as e:
            log.info("%s: caching engine entry unusable: %s: %s", self.NAME, type(e).__name__, e)
            return None
        prepared.priority = job.priority  # the engine keys by content and preference, not priority
        return prepared

    def _engine_put(self, key: str, prepared: DriverPreparedModel) -> None:
        """Store (or replace) the engine's entry; failing only means no entry."""
        try:
            self.engine.put(key, *self.save(prepared))
        except Exception as e:
            log.info("%s: caching engine put failed: %s: %s", self.NAME, type(e).__name__, e)
