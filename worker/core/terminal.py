"""Text from the gateway made safe to show on an operator's terminal.

Account ids, model names, request ids, reasons and notes come from outside. Written raw, an ESC
sequence in a model name clears the screen or rewrites earlier lines, a BEL rings, a carriage return
or a bidirectional override makes a line say something else. ``printable`` keeps every printable
character and writes every other one as a visible backslash escape (``\\x1b``, ``\\u202e``), so
nothing reaches the terminal that it would interpret, and an operator still sees that something odd
was there. Every command that prints such text to a terminal passes it through here.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every character ``str.isprintable`` refuses (C0 and C1 controls, DEL, ESC,
    format characters such as bidirectional overrides, line and paragraph separators, unassigned code
    points) written as its backslash escape; printable text comes back unchanged."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )
