"""`format` values we enforce, written as full-match regexes over the decoded string (RFC 3339 dates and times
with real month lengths and leap years, RFC 5321-style dot-atom emails, RFC 4122 UUIDs, RFC 3986 absolute URIs,
dotted-quad IPv4 without leading zeros) and handed out as automata (`format_fsm`)."""
from __future__ import annotations

from .charfsm import CharFSM

_D = "[0-9]"
_YEAR = f"{_D}{{4}}"
_LEAP = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
_MD = ("((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))")
DATE = f"({_YEAR}-{_MD}|{_LEAP}-02-29)"
_OFFSET = "([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
# A leap second (:60) is valid only at 23:59:60 UTC; we accept it with Z / +00:00 / -00:00 and reject it at
# other offsets: rejecting is the safe direction for generation, and exact is too big. Exact (each local HH:MM
# tied to its one '+' and one '-' offset, a 1440-way product) was measured: the `time` string lexeme's byte
# DFA grows from 207 to 145,247 states and compiles in 265 s instead of 0.4 s. Built directly as an automaton
# instead of a regex it is still about 11,000 character states, and no DFA can do with fewer: the
# local minute of day (1440 values) must be remembered at each of the six positions between it and the
# offset's sign. Lowered, that is 11 MB and 0.7 s in generation mode, and with every JSON escape spelling
# (\u0030 for a digit) 66,000 states, 68 MB and 4.8 s, for a value no extraction writes.
TIME = (f"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?{_OFFSET}"
        f"|23:59:60(\\.[0-9]+)?([zZ]|[+-]00:00))")
DATE_TIME = f"{DATE}[tT]{TIME}"
_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = f"{_OCTET}(\\.{_OCTET}){{3}}"
_H16 = "[0-9a-fA-F]{1,4}"
_LS32 = f"({_H16}:{_H16}|{IPV4})"
IPV6 = "(" + "|".join([
    f"({_H16}:){{6}}{_LS32}", f"::({_H16}:){{5}}{_LS32}", f"({_H16})?::({_H16}:){{4}}{_LS32}",
    f"(({_H16}:){{0,1}}{_H16})?::({_H16}:){{3}}{_LS32}", f"(({_H16}:){{0,2}}{_H16})?::({_H16}:){{2}}{_LS32}",
    f"(({_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}", f"(({_H16}:){{0,4}}{_H16})?::{_LS32}",
    f"(({_H16}:){{0,5}}{_H16})?::{_H16}", f"(({_H16}:){{0,6}}{_H16})?::"]) + ")"
_QUOTED = '"([\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]|\\\\[\\x20-\\x7e])*"'
EMAIL = (f"({_ATEXT}+(\\.{_ATEXT}+)*|{_QUOTED})@({_LABEL}(\\.{_LABEL})*|\\[{IPV4}\\]"
         f"|\\[IPv6:{IPV6}\\])")
_HEX = "[0-9a-fA-F]"
UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
# RFC 3986 absolute URI: scheme ":" hier-part [ "?" query ] [ "#" fragment ]
_PCT = "%[0-9a-fA-F]{2}"
_UNRES = "[A-Za-z0-9._~-]"
_SUBD = "[!$&'()*+,;=]"
_PCHAR = f"({_UNRES}|{_PCT}|{_SUBD}|[:@])"
_HOST = (f"(\\[({IPV6}|v[0-9a-fA-F]+\\.({_UNRES}|{_SUBD}|:)+)\\]|{IPV4}|({_UNRES}|{_PCT}|{_SUBD})*)")
_AUTH = f"(({_UNRES}|{_PCT}|{_SUBD}|:)*@)?{_HOST}(:[0-9]*)?"
_HIER = (f"(//{_AUTH}(/{_PCHAR}*)*|/({_PCHAR}+(/{_PCHAR}*)*)?|{_PCHAR}+(/{_PCHAR}*)*|)")
URI = f"[A-Za-z][A-Za-z0-9+.-]*:{_HIER}(\\?({_PCHAR}|[/?])*)?(#({_PCHAR}|[/?])*)?"

# longest valid value, in characters, where a standard bounds it (RFC 5321 4.5.3.1.3: a path is at most 256
# octets with its angle brackets, so an address is at most 254)
FORMAT_MAX_LENGTH = {"email": 254}

FORMATS = {"date": DATE, "time": TIME, "date-time": DATE_TIME, "email": EMAIL, "uuid": UUID, "uri": URI,
           "ipv4": IPV4}
_BUILT: dict[str, CharFSM] = {}     # one automaton per format of FORMATS (a fixed set), built on first use


def format_fsm(name: str) -> CharFSM:
    """The character automaton of format `name` (a key of FORMATS)."""
    fsm = _BUILT.get(name)
    if fsm is None:
        from .regex import regex_to_char_fsm
        fsm = _BUILT[name] = regex_to_char_fsm(FORMATS[name], False)
    return fsm
