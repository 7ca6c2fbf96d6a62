"""The service's interface definition: every call the service answers, declared once (as AIDL declares
a HAL): its name, the kind of object it is called on, its typed fields (which of them carry file
descriptors follows from their kind), its result, and whether the thread that reads it answers it
at once (inline) or it runs in a thread slot of the caller's uid.

The client encodes a call's arguments by its declaration (`Method.encode`) and decodes the answer
(`Method.decode_result`); the server decodes and checks every request by it (`Method.decode`) before
any handler runs, so a malformed field is INVALID_ARGUMENT naming it. Adding a HAL method is one
declaration here plus, when it has behaviour of its own, a handler in the server. The wire format:
`codec` (messages) and `values` (the HAL's plain values).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..hal import ErrorStatus, ExecutionPreference, MeasureTiming, Priority, Request, Timing, invalid
from .codec import Decoder, Encoder
from .values import (MAX_RANK, check_bytes, check_int, check_list, check_opt_int, check_str, decode_desc,
                     decode_role, decode_shapes, decode_timing, encode_desc, encode_role, encode_shapes, encode_timing,
                     plain)

#: The kinds of objects a connection owns (a call's target; None: the device, or the service itself).
PREPARED, BUFFER, BURST, FENCED = "prepared model", "buffer", "burst", "fenced execution callback"
EXECUTION = "reusable execution"
OBJECT_KINDS = (PREPARED, BUFFER, BURST, FENCED, EXECUTION)


@dataclass(frozen=True)
class Field:
    """One argument of a call: its HAL parameter name, how it crosses (`kind`, see `encode_field` and
    `decode_field`), how errors name it (`what`), the enum it stands for, and whether it may be absent
    at the end of the argument list."""

    name: str
    kind: str
    what: str
    enum: type | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"field {self.name}: unknown kind {self.kind!r}")

    @property
    def fds(self) -> bool:
        return KINDS[self.kind].fds


@dataclass(frozen=True)
class Method:
    """One call: its name (the driver method's, when the server runs it generically), the kind of
    object it is called on, its fields, then `rest` (the kind of each further item, for calls taking a
    list), its result kind, whether it is answered inline, whether LOW work gives way while it is
    handled (`execution`), whether the generic handler writes copies of the app's files back after it
    (`writes_back`), whether the driver method takes `client=ClientId(uid)` (`client`), the kind of
    object its result is (`makes`), and the payload of its asynchronous completion (`event`)."""

    name: str
    target: str | None
    fields: tuple[Field, ...] = ()
    result: str = "none"
    inline: bool = False
    rest: Field | None = None
    execution: bool = False
    writes_back: bool = False
    client: bool = False
    makes: str | None = None
    event: str | None = None

    @property
    def fds(self) -> tuple[str, ...]:
        """The fields that carry file descriptors."""
        return tuple(f.name for f in self.fields if f.fds)

    @property
    def required(self) -> int:
        return sum(not f.optional for f in self.fields)

    # --- the client's side ---------------------------------------------------------------------------
    def encode(self, enc: Encoder, values: Sequence[Any]) -> list:
        """The call's argument list (descriptors go to `enc`)."""
        n = len(self.fields)
        if self.rest is None and not self.required <= len(values) <= n:
            raise TypeError(f"{self.name} takes {n} arguments, got {len(values)}")
        args = [encode_field(f.kind, enc, v) for f, v in zip(self.fields, values)]
        if self.rest is not None:
            args.extend(encode_field(self.rest.kind, enc, v) for v in values[n:])
        return args

    def decode_result(self, value: Any) -> Any:
        return _RESULTS[self.result][1](value)

    # --- the server's side ---------------------------------------------------------------------------
    def decode(self, dec: Decoder, args: list, place: Callable[[Request], Request] | None = None) -> list:
        """The call's arguments checked and decoded, in field order (absent optional ones as None);
        `place` maps each `request` field's pools (the server's kept mappings)."""
        what, n, lo = f"{self.name} arguments", len(self.fields), self.required
        if self.rest is None:
            if lo == n:
                check_list(args, what, length=n)
            elif not lo <= len(args) <= n:
                raise invalid(f"{what}: expected {lo} to {n} items, got {len(args)}")
        values = [decode_field(f, dec, a, place) for f, a in zip(self.fields, args)]
        values.extend([None] * (n - len(values)))
        if self.rest is not None:
            values.extend(decode_field(self.rest, dec, a, place) for a in args[n:])
        return values

    def encode_result(self, value: Any) -> Any:
        return _RESULTS[self.result][0](value)


# --- fields ----------------------------------------------------------------------------------------------
Place = Callable[[Request], Request] | None


@dataclass(frozen=True)
class Kind:
    """How a kind of field crosses: `encode(enc, value)` on the client (numpy integers as Python ints,
    HAL values as `codec` lists, descriptors to `enc`), `decode(field, dec, value, place)` on the
    server (checked; INVALID_ARGUMENT naming `field.what`), and whether it carries descriptors."""

    encode: Callable[[Encoder, Any], Any]
    decode: Callable[[Field, Decoder, Any, Place], Any]
    fds: bool = False


def _enum(cls: type, value: int) -> Any:
    """An enum member, or the raw integer when it names none (the driver then reports it)."""
    try:
        return cls(value)
    except ValueError:
        return value


def _decode_int(f: Field, dec: Decoder, v: Any, place: Place) -> Any:
    value = check_int(v, f.what)
    return value if f.enum is None else _enum(f.enum, value)


def _decode_required_cache(f: Field, dec: Decoder, v: Any, place: Place) -> Any:
    handles = dec.cache(v)
    if handles is None:
        raise invalid(f"{f.what} are required")
    return handles


def _decode_request(f: Field, dec: Decoder, v: Any, place: Place) -> Request:
    request = dec.request(v, f.what)
    return request if place is None else place(request)


def _decode_fds(f: Field, dec: Decoder, v: Any, place: Place) -> list[int]:
    return [dec.fd(x, f"{f.what} {k}") for k, x in enumerate(check_list(v, f.what, 1024))]


def _same(v: Any) -> Any:
    return v


def _sent(enc: Encoder, v: Any) -> Any:
    return v


def _as_sent(f: Field, dec: Decoder, v: Any, place: Place) -> Any:
    return v


def _a_list(f: Field, dec: Decoder, v: Any, place: Place) -> list:
    return check_list(v, f.what)


_REQUEST = lambda enc, v: enc.request(v)  # noqa: E731
_CACHE = lambda enc, v: enc.cache(v)  # noqa: E731
#: Every kind of field, by name.
KINDS: dict[str, Kind] = {
    "int": Kind(lambda enc, v: plain(v), _decode_int),
    "opt_int": Kind(lambda enc, v: plain(v), lambda f, dec, v, place: check_opt_int(v, f.what)),
    "bytes": Kind(lambda enc, v: bytes(v), lambda f, dec, v, place: check_bytes(v, f.what)),
    "opt_bytes": Kind(lambda enc, v: None if v is None else bytes(v),
                      lambda f, dec, v, place: None if v is None else check_bytes(v, f.what)),
    "model": Kind(lambda enc, v: enc.model(v), lambda f, dec, v, place: dec.model(v, f.what), True),
    "cache": Kind(_CACHE, lambda f, dec, v, place: dec.cache(v), True),
    "required_cache": Kind(_CACHE, _decode_required_cache, True),
    # a request whose pools the server maps in place, one it keeps as sent (bursts keep them by slot),
    # and one read by its handler only once its fences are signalled
    "request": Kind(_REQUEST, _decode_request, True),
    "slotted_request": Kind(_REQUEST, lambda f, dec, v, place: dec.request(v, f.what), True),
    "late_request": Kind(_REQUEST, _as_sent, True),
    "handle": Kind(lambda enc, v: enc.handle(v), lambda f, dec, v, place: dec.handle(v, f.what), True),
    "fd": Kind(lambda enc, v: enc.fd(v), lambda f, dec, v, place: dec.fd(v, f.what), True),
    "fds": Kind(lambda enc, v: [enc.fd(x) for x in v], _decode_fds, True),
    "dims": Kind(lambda enc, v: [plain(d) for d in v] if isinstance(v, (list, tuple)) else v,
                 lambda f, dec, v, place: [check_int(d, f.what) for d in check_list(v, f"{f.what}s", MAX_RANK)]),
    "desc": Kind(lambda enc, v: encode_desc(v), lambda f, dec, v, place: decode_desc(v)),
    "roles": Kind(lambda enc, v: [encode_role(r) for r in v],
                  lambda f, dec, v, place: [decode_role(r, f"{f.what} {k}")
                                            for k, r in enumerate(check_list(v, f"{f.what}s"))]),
    "objects": Kind(_sent, _a_list),  # object ids (the handler looks each up)
    "slots": Kind(_sent, _a_list),    # a burst's pool slots (its handler reads them)
    "files": Kind(_sent, _a_list),    # [st_dev, st_ino] of files (its handler reads them)
    "any": Kind(_sent, _as_sent),
}


def encode_field(kind: str, enc: Encoder, v: Any) -> Any:
    """One argument as it crosses."""
    return KINDS[kind].encode(enc, v)


def decode_field(f: Field, dec: Decoder, v: Any, place: Place = None) -> Any:
    """One argument checked and decoded (INVALID_ARGUMENT naming `f.what` when malformed)."""
    return KINDS[f.kind].decode(f, dec, v, place)


# --- results ---------------------------------------------------------------------------------------------
def encode_execution(result: tuple) -> list:
    shapes, timing = result
    return [encode_shapes(shapes), encode_timing(timing)]


def decode_execution(v: Any) -> tuple:
    shapes, timing = check_list(v, "execution result", length=2)
    return decode_shapes(shapes) or [], decode_timing(timing)


def encode_info(info: tuple) -> list:
    """A fenced execution's (status, timing launched, timing fenced)."""
    status, launched, fenced = info
    return [int(status), encode_timing(launched), encode_timing(fenced)]


def decode_info(v: Any) -> tuple[ErrorStatus, Timing, Timing]:
    status, launched, fenced = check_list(v, "fenced execution info", length=3)
    try:
        return ErrorStatus(status), decode_timing(launched), decode_timing(fenced)
    except ValueError:
        return ErrorStatus.GENERAL_FAILURE, Timing(), Timing()


def encode_completion(status: Any, shapes: Any, timing: Timing) -> list:
    """An asynchronous execution's completion (the EVENT's payload)."""
    return [int(status), encode_shapes(list(shapes or [])), encode_timing(timing)]


def decode_completion(v: Any) -> tuple:
    """(status, shapes, timing) of a completion; ValueError for an unknown status."""
    status, shapes, timing = check_list(v, "execution completion", length=3)
    return ErrorStatus(status), decode_shapes(shapes) or [], decode_timing(timing)


def _decode_map(v: Any) -> dict:
    if type(v) is not dict:
        raise invalid("answered with something other than a map")
    return v


def _decode_prepared(v: Any) -> tuple[Any, str | None]:
    """(object id, where the driver took it from: its fleet tier's word, or None)."""
    if isinstance(v, list):
        oid, source = check_list(v, "prepare_model result", length=2)
        return oid, check_str(source, "prepare_model cache source")
    return v, None


def _decode_pair(what: str) -> Callable[[Any], tuple]:
    return lambda v: tuple(check_list(v, what, length=2))


def _decode_fenced(v: Any) -> tuple[bool, Any, Any]:
    """(whether a sync fence came, the callback's object id, the completion's info or None)."""
    fence, oid, info = check_list(v, "execute_fenced result", length=3)
    return fence is not None, oid, None if info is None else decode_info(info)


#: result kind -> (the server's encoding, the client's decoding)
_RESULTS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "none": (lambda v: None, lambda v: None),
    "flags": (lambda v: [bool(f) for f in v], lambda v: [bool(f) for f in check_list(v, "supported")]),
    "execution": (encode_execution, decode_execution),
    "info": (encode_info, decode_info),
    "object": (_same, lambda v: check_int(v, "object id", 1)),
    "map": (_same, _decode_map),
    "prepared": (_same, _decode_prepared),
    "buffer": (_same, _decode_pair("allocate result")),
    "channelled": (_same, _decode_pair("an object and whether its channel was taken")),
    "fenced": (_same, _decode_fenced),
}

# --- the calls -------------------------------------------------------------------------------------------
_MEASURE = Field("measure", "int", "measure", MeasureTiming)
_DEADLINE = Field("deadline", "opt_int", "deadline")
_LOOP = Field("loop_timeout_ns", "opt_int", "loop timeout")

# The service's own calls (answered by the thread that reads them).
HELLO = Method("hello", None, (Field("version", "any", "protocol version", optional=True),), "map", inline=True)
RELEASE = Method("release", None, rest=Field("oid", "any", "object id"), inline=True)
FORGET_MEMORY = Method("forget_memory", None, (Field("files", "files", "forget_memory files"),), inline=True)
STATUS = Method("status", None, result="map", inline=True)
# IDevice
GET_SUPPORTED_OPERATIONS = Method("get_supported_operations", None, (Field("model", "model", "model"),), "flags")
PREPARE_MODEL = Method("prepare_model", None, (
    Field("model", "model", "model"), Field("preference", "int", "preference", ExecutionPreference),
    Field("priority", "int", "priority", Priority), _DEADLINE, Field("cache", "cache", "cache"),
    Field("token", "opt_bytes", "token")), "prepared", client=True, makes=PREPARED)
PREPARE_MODEL_FROM_CACHE = Method("prepare_model_from_cache", None, (
    _DEADLINE, Field("cache", "required_cache", "prepare_model_from_cache: cache handles"),
    Field("token", "bytes", "token")), "object", client=True,
    makes=PREPARED)
ALLOCATE = Method("allocate", None, (
    Field("desc", "desc", "buffer desc"), Field("prepared_models", "objects", "allocate prepared models"),
    Field("input_roles", "roles", "input role"), Field("output_roles", "roles", "output role")), "buffer",
    makes=BUFFER)
# IPreparedModel
EXECUTE_SYNCHRONOUSLY = Method("execute_synchronously", PREPARED, (
    Field("request", "request", "request"), _MEASURE, _DEADLINE, _LOOP), "execution", execution=True,
    writes_back=True, client=True)
EXECUTE = Method("execute", PREPARED, (Field("request", "request", "request"), _MEASURE, _DEADLINE, _LOOP),
                 client=True, event="completion")
EXECUTE_FENCED = Method("execute_fenced", PREPARED, (
    Field("request", "late_request", "request"), Field("wait_for", "fds", "wait_for"), _MEASURE, _DEADLINE, _LOOP,
    Field("timeout_after_fence_ns", "opt_int", "timeout after fence")), "fenced", client=True, makes=FENCED)
CREATE_REUSABLE_EXECUTION = Method("create_reusable_execution", PREPARED, (
    Field("request", "request", "request"), _MEASURE, _LOOP, Field("channel", "fd", "execution channel", optional=True)),
    "channelled", client=True, makes=EXECUTION)
CONFIGURE_EXECUTION_BURST = Method("configure_execution_burst", PREPARED, (
    Field("channel", "fd", "burst channel", optional=True),), "channelled", makes=BURST)
# IBurst (on its channel, or on the connection)
BURST_EXECUTE = Method("burst_execute", BURST, (
    Field("request", "slotted_request", "request"), Field("slots", "slots", "burst slots"), _MEASURE, _DEADLINE,
    _LOOP), "execution", execution=True, client=True)
BURST_RELEASE = Method("burst_release", BURST, rest=Field("slot", "any", "burst slot"), inline=True)
# IExecution (the request and its memory kept by the service from its creation)
EXECUTION_COMPUTE = Method("execution_compute", EXECUTION, (_DEADLINE,), "execution", execution=True)
# IBuffer
COPY_TO = Method("copy_to", BUFFER, (Field("dst", "handle", "copy_to memory"),), writes_back=True)
COPY_FROM = Method("copy_from", BUFFER, (Field("src", "handle", "copy_from memory"),
                                         Field("dimensions", "dims", "copy_from dimension")))
# IFencedExecutionCallback
GET_EXECUTION_INFO = Method("get_execution_info", FENCED, result="info")

#: Every call, by name.
METHODS: dict[str, Method] = {m.name: m for m in (
    HELLO, RELEASE, FORGET_MEMORY, STATUS, GET_SUPPORTED_OPERATIONS, PREPARE_MODEL, PREPARE_MODEL_FROM_CACHE,
    ALLOCATE, EXECUTE_SYNCHRONOUSLY, EXECUTE, EXECUTE_FENCED, CREATE_REUSABLE_EXECUTION, CONFIGURE_EXECUTION_BURST,
    BURST_EXECUTE, BURST_RELEASE, EXECUTION_COMPUTE, COPY_TO, COPY_FROM, GET_EXECUTION_INFO)}
#: The calls a channel takes, by the kind of object it serves.
CHANNEL_METHODS = {BURST: (BURST_EXECUTE, BURST_RELEASE), EXECUTION: (EXECUTION_COMPUTE,)}
