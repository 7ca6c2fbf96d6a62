"""The facts of one import that every subgraph's conversion shares: the file, its mapping, the
problems found so far, what was referenced and copied, and the bodies already converted."""
from __future__ import annotations

from collections import Counter

from ...runtime import Memory, Model
from .imported import Problem
from .schema import FlatModel

#: Constants the importer computes rather than references (zero states and biases, densified and
#: dequantized weights) are bounded by this many bytes, or 16 times the file size if larger, so a
#: corrupt shape is refused before it is allocated.
COMPUTED_FLOOR = 64 << 20
#: WHILE / IF bodies may nest this deep.
MAX_NESTING = 32


class ImportContext:
    """One import of one file: what its subgraphs' graphs read and add to (problems are collected
    across every subgraph, so one error lists them all)."""

    def __init__(self, flat: FlatModel, memory: Memory, relaxed: bool = False) -> None:
        self.flat = flat
        self.memory = memory
        self.relaxed = relaxed
        self.problems: list[Problem] = []
        self.referenced_regions: set[tuple[int, int]] = set()
        self.copied_bytes = 0
        self.operators: Counter = Counter()
        self.operations: Counter = Counter()
        #: Converted bodies by (subgraph, input order, output order); None where it had problems.
        self.submodels: dict[tuple, Model | None] = {}
        #: Subgraphs being converted, outermost first (a body may not call one of its callers).
        self.active: list[int] = [0]
        self.computed_limit = max(COMPUTED_FLOOR, 16 * flat.size)

    @property
    def referenced_bytes(self) -> int:
        """Bytes of the file mapping that constants reference (each region counted once)."""
        return sum(length for _, length in self.referenced_regions)
