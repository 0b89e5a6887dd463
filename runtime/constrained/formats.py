"""`format` values we enforce, as full-match regexes over the decoded string (RFC 3339 dates and times with
real month lengths and leap years, RFC 5321-style dot-atom emails, RFC 4122 UUIDs, RFC 3986 absolute URIs,
dotted-quad IPv4 without leading zeros)."""
from __future__ import annotations

_D = "[0-9]"
_YEAR = f"{_D}{{4}}"
_LEAP = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
_MD = ("((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))")
DATE = f"({_YEAR}-{_MD}|{_LEAP}-02-29)"
_OFFSET = "([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
TIME = f"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?{_OFFSET}"
DATE_TIME = f"{DATE}[tT]{TIME}"
_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = f"{_OCTET}(\\.{_OCTET}){{3}}"
EMAIL = f"{_ATEXT}+(\\.{_ATEXT}+)*@({_LABEL}(\\.{_LABEL})*|\\[{IPV4}\\])"
_HEX = "[0-9a-fA-F]"
UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_UCHAR = "([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9a-fA-F]{2})"
URI = f"[A-Za-z][A-Za-z0-9+.-]*:{_UCHAR}*(#([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9a-fA-F]{{2}})*)?"

FORMATS = {"date": DATE, "time": TIME, "date-time": DATE_TIME, "email": EMAIL, "uuid": UUID, "uri": URI,
           "ipv4": IPV4}
