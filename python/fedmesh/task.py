"""One task from the node (``fit`` or ``evaluate``) and the trainer's one answer to it.

The node reads exactly one answer per task and rejects a task whose answer breaks the
rules, so ``Task.reply`` checks the same rules first (example count, metric names and
values, tensor names, shapes and finiteness) and raises ``ValueError`` before sending
anything: the trainer can still fix the reply, or ``fail`` the task.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from .errors import ProtocolError
from .tensors import TensorSpec, Weights, pack

if TYPE_CHECKING:
    from .site import Site

_METRIC_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_ERROR_MESSAGE = 8192
"""Characters of a ``fail`` message that are sent; longer ones are cut (the node forwards
the message to the aggregator)."""


def check_num_examples(n: Any, *, minimum: int) -> int:
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise ValueError(f"num_examples must be an int >= {minimum}, got {n!r}")
    if not minimum <= int(n) < 2**63:
        raise ValueError(f"num_examples must be an int >= {minimum}, got {int(n)}")
    return int(n)


def check_metrics(metrics: Optional[Mapping[str, Any]]) -> Dict[str, float]:
    """Metric names of 1..64 ``[A-Za-z0-9_.-]`` with finite numeric values, as floats."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ValueError(f"metrics must be a mapping name -> number, not {type(metrics).__name__}")
    out: Dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"metric name {name!r} is not 1..64 characters of [A-Za-z0-9_.-]")
        # Python and numpy numbers, and 0-d arrays/tensors (anything float() takes but a bool).
        if isinstance(value, (bool, str, bytes)) or not (
            isinstance(value, numbers.Real) or hasattr(value, "__float__")
        ):
            raise ValueError(f"metric {name!r} must be a number, got {value!r}")
        try:
            f = float(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"metric {name!r} must be a number, got {value!r}") from e
        if not math.isfinite(f):
            raise ValueError(f"metric {name!r} is {f}; metrics must be finite")
        out[name] = f
    return out


def _field(header: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """A typed task field; JSON integers are accepted where a float is expected."""
    value = header.get(key, default)
    accepted = (int, float) if kind is float else kind
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise ProtocolError(f"task field {key!r} is {value!r}, not a {kind.__name__}")
    return float(value) if kind is float else value


class Task:
    """A ``fit`` or ``evaluate`` task as the node sent it.

    ``weights`` maps each tensor name to a read-only float32 numpy array of the listed
    shape, in the task's order. The arrays are views into the one buffer the task arrived
    in (no copies); ``np.array(a)`` gives a writable copy where one is needed.
    ``header`` is the task's JSON header as received.

    Answer with exactly one ``reply`` or ``fail``. A task left unanswered when the loop
    over ``Site.tasks()`` moves on is failed automatically, since the node waits for an
    answer to every task.
    """

    kind: str
    """``"fit"`` or ``"evaluate"``."""
    id: int
    round: int
    node_id: str
    epochs: int
    steps: int
    """> 0 in gossip mode: take this many minibatch steps instead of ``epochs`` passes."""
    lr: float
    batch: int
    momentum: float
    prox_mu: float
    seed: int
    loss: str
    deadline_unix_ms: int
    """0 when the task has no deadline."""
    weights: Weights
    header: Dict[str, Any]

    def __init__(self, site: "Site", header: Dict[str, Any], specs: List[TensorSpec], weights: Weights) -> None:
        self._site = site
        self._specs = specs
        self._answered = False
        self.header = header
        self.kind = header["type"]
        task_id = header.get("task")
        if not isinstance(task_id, int) or isinstance(task_id, bool):
            raise ProtocolError(f"{self.kind} message has no integer 'task' id")
        self.id = task_id
        self.round = _field(header, "round", int, 0)
        self.node_id = _field(header, "node_id", str, "")
        self.epochs = _field(header, "epochs", int, 0)
        self.steps = _field(header, "steps", int, 0)
        self.lr = _field(header, "lr", float, 0.0)
        self.batch = _field(header, "batch", int, 0)
        self.momentum = _field(header, "momentum", float, 0.0)
        self.prox_mu = _field(header, "prox_mu", float, 0.0)
        self.seed = _field(header, "seed", int, 0)
        self.loss = _field(header, "loss", str, "")
        self.deadline_unix_ms = _field(header, "deadline_unix_ms", int, 0)
        self.weights = weights

    @property
    def answered(self) -> bool:
        """Whether ``reply`` or ``fail`` has been sent for this task."""
        return self._answered

    def _claim(self) -> None:
        if self._answered:
            raise RuntimeError(f"task {self.id} has already been answered; the node reads one answer per task")

    def reply(
        self,
        weights: Optional[Mapping[str, Any]] = None,
        num_examples: Optional[int] = None,
        metrics: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Send the result.

        fit: ``weights`` holds exactly the task's tensor names and shapes (any numeric
        array-likes; sent as float32, all finite) and ``num_examples`` > 0 weighs the
        update; ``metrics["loss"]`` is the training loss the node reports.
        evaluate: no ``weights``; ``num_examples`` > 0 held-out examples; ``metrics`` holds
        ``loss`` and any other scores. Raises ``ValueError`` (nothing sent) on a bad reply.
        """
        self._claim()
        n = check_num_examples(num_examples, minimum=1)
        scores = check_metrics(metrics)
        if self.kind == "fit":
            if weights is None:
                raise ValueError("a fit task's reply needs its trained weights")
            arrays = pack(self._specs, weights)
        else:
            if weights is not None:
                raise ValueError("an evaluate task's reply carries no weights")
            arrays = []
        header = {
            "type": "result",
            "task": self.id,
            "num_examples": n,
            "metrics": scores,
            "tensors": [s.to_json() for s in self._specs] if self.kind == "fit" else [],
        }
        self._answered = True
        self._site._send(header, arrays)

    def fail(self, message: str) -> None:
        """Tell the node the trainer could not do this task; it fails the task with ``message``."""
        self._claim()
        text = str(message)
        if len(text) > MAX_ERROR_MESSAGE:
            text = text[: MAX_ERROR_MESSAGE - 3] + "..."
        self._answered = True
        self._site._send({"type": "error", "task": self.id, "message": text}, [])

    def __repr__(self) -> str:
        return (
            f"Task(kind={self.kind!r}, id={self.id}, round={self.round}, "
            f"tensors={len(self._specs)}, answered={self._answered})"
        )
