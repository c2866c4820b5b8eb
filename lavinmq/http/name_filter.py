"""The regex name filter of list requests (`?name=...&use_regex=true`),
bounded so that no pattern and no set of names can stall the event loop.

RE2 matches without backtracking, but its cost per byte still grows with
the compiled program (and its DFA can be made to thrash): a crafted
pattern over 1,500 crafted 255-byte names held the loop 16.6 s. So:

- a pattern whose RE2 program is larger than MAX_PROGRAM is refused (a
  name filter needs tens of instructions; the worst pattern under the cap
  costs ~1.5 ms over a 255-byte name);
- matching runs in slices of at most SLICE seconds with a yield to the
  loop between them, one filter at a time in the process (so that many
  concurrent requests do not add their slices up within one loop turn);
- a request whose matching takes more than BUDGET seconds of that time is
  answered 400.

Route handlers call `listing()` synchronously, so the filter, and what
follows it (sort, columns, page), runs in lavinmq.http.sliced's response,
which computes its body in prepare(), where it may await."""
import asyncio
import time

from lavinmq.name_regex import NameRegex

MAX_PATTERN = 1024          # characters
MAX_PROGRAM = 1000          # RE2 program size (instructions)
MAX_MEM = 1 << 20           # RE2's memory for the compiled program and its DFA cache
SLICE = 0.002               # seconds of matching between yields to the loop
BUDGET = 3.0                # seconds of CPU time matching, per request

_turn = None                # asyncio.Lock, made in the loop that uses it


class FilterRefused(ValueError):
    """A pattern or a filter run the API answers 400 to."""


def compile_pattern(pattern):
    if len(pattern) > MAX_PATTERN:
        raise FilterRefused(f"regex longer than {MAX_PATTERN} characters")
    try:
        rx = NameRegex(pattern, MAX_MEM)
    except ValueError as exc:
        raise FilterRefused(f"bad regex: {exc}") from None
    if rx.programsize > MAX_PROGRAM:
        raise FilterRefused(f"bad regex: too complex ({rx.programsize} RE2 instructions, at most "
                            f"{MAX_PROGRAM}); use a simpler pattern")
    return rx


async def select(items, rx, name_of):
    """The items whose name rx finds a match in, in order."""
    global _turn
    if _turn is None:
        _turn = asyncio.Lock()
    kept = []
    spent = 0.0
    async with _turn:
        i, n = 0, len(items)
        while i < n:
            # the slice in wall-clock time (what others wait), the budget in
            # CPU time (what this request costs, however loaded the machine)
            deadline = time.perf_counter() + SLICE
            cpu = time.thread_time()
            while i < n:
                item = items[i]
                i += 1
                if rx.search(name_of(item)):
                    kept.append(item)
                if time.perf_counter() > deadline:     # a search can take ~1.5 ms: look after each
                    break
            spent += time.thread_time() - cpu
            if spent > BUDGET:
                raise FilterRefused(f"regex filter took more than {BUDGET:g} s over {i} of {n} names; "
                                    f"use a simpler pattern")
            if i < n:
                await asyncio.sleep(0)
    return kept
