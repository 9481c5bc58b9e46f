"""The one step interface of the consumer and the sweeper: named steps, each given the next.

A ``Step`` does its own work on what it is given (``process``), then hands it on to its
``next_step`` (``submit``); a ``Chain`` is steps linked in order, and is itself a step (a chain
inside a chain runs all of its steps where it stands). The last step of a batch's chain is the one
that commits or acknowledges, so nothing before it can make a batch look done.

Every step has a ``name``, unique in the ``Steps`` it belongs to (chains within included). Those
names are the public way to look at or change a pipeline without touching its internals:

* ``steps.wrap(name, around)``: ``around(work, batch)`` is called in place of the step's own work,
  and calls ``work(batch)`` to do it (timing, counting, injecting a failure); returns the
  function that puts the step back;
* ``steps.replace(name, step)``: another step in its place (it takes the same name), returning
  the one it replaced.

A wrapped or replaced step keeps its place: the step before it hands on to it, it hands on to the
step after it. Wrapping a chain wraps all of its steps' work together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

B = TypeVar("B")

Work = Callable[[B], None]
Around = Callable[[Callable[[B], None], B], None]


class Step(Generic[B]):
    """One named step. Subclasses implement ``process``; ``submit`` is the same for every step."""

    name: str = "step"
    next_step: Step[B] | None = None

    def process(self, batch: B) -> None:
        raise NotImplementedError

    def submit(self, batch: B) -> None:
        """Do this step's work on ``batch``, then hand it to the next step."""
        self.process(batch)
        if self.next_step is not None:
            self.next_step.submit(batch)

    def inner(self) -> tuple[Steps, ...]:
        """The steps this step runs inside its own work (a chain's, a transaction's)."""
        return ()


class Call(Step[B]):
    """A step whose work is a function of the batch."""

    def __init__(self, name: str, work: Work[B]) -> None:
        self.name = name
        self.work = work

    def process(self, batch: B) -> None:
        self.work(batch)


class Wrapped(Step[B]):
    """``step`` with ``around`` called in place of its work (see the module docstring)."""

    def __init__(self, step: Step[B], around: Around[B]) -> None:
        self.name = step.name
        self.step = step
        self.around = around

    def process(self, batch: B) -> None:
        self.around(self.step.process, batch)

    def inner(self) -> tuple[Steps, ...]:
        return self.step.inner()


class Steps:
    """Named steps, found by name through every chain within them; not linked to each other."""

    def __init__(self, steps: Sequence[Step[Any]]) -> None:
        self.steps: list[Step[Any]] = list(steps)
        self._link()

    def _link(self) -> None:
        """Nothing to link: these steps take different inputs (a ``Chain`` links its own)."""

    def __getitem__(self, name: str) -> Step[Any]:
        holder, index = self._find(name)
        return holder.steps[index]

    def __contains__(self, name: str) -> bool:
        return any(found == name for found in self.names())

    def names(self) -> Iterator[str]:
        """Every step's name, chains within included, in order."""
        for step in self.steps:
            yield step.name
            for steps in step.inner():
                yield from steps.names()

    def replace(self, name: str, step: Step[Any]) -> Step[Any]:
        """Put ``step`` in the place of the step ``name`` (``step`` takes the name); the old one."""
        holder, index = self._find(name)
        old = holder.steps[index]
        step.name = name
        holder.steps[index] = step
        holder._link()
        return old

    def wrap(self, name: str, around: Around[Any]) -> Callable[[], None]:
        """Call ``around(work, batch)`` in place of the step ``name``'s work; the undo."""
        old = self.replace(name, Wrapped(self[name], around))
        return lambda: self._put_back(name, old)

    def _put_back(self, name: str, old: Step[Any]) -> None:
        self.replace(name, old)

    def _find(self, name: str) -> tuple[Steps, int]:
        for index, step in enumerate(self.steps):
            if step.name == name:
                return self, index
        for step in self.steps:
            for steps in step.inner():
                try:
                    return steps._find(name)
                except KeyError:
                    continue
        raise KeyError(name)


class Chain(Steps, Step[B]):
    """Steps linked in order, each given the next; ``submit`` runs them all, then the next step."""

    def __init__(self, name: str, steps: Sequence[Step[B]]) -> None:
        self.name = name
        super().__init__(steps)

    def _link(self) -> None:
        for step, following in zip(self.steps, [*self.steps[1:], None], strict=True):
            step.next_step = following

    def process(self, batch: B) -> None:
        if self.steps:
            self.steps[0].submit(batch)

    def inner(self) -> tuple[Steps, ...]:
        return (self,)
