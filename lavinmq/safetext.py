"""Names come from clients: a queue, user or vhost name may hold escape
sequences or newlines. Shown on a terminal or written to a log, they could
rewrite the screen or forge log lines; escaped, they can't."""

_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0))}
_CONTROLS.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


def escape_controls(text: str) -> str:
    """Control characters (C0, DEL, C1, line/paragraph separators) as \\xNN."""
    return text.translate(_CONTROLS)
