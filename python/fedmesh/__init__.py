"""fedmesh: the trainer side of fedmesh-node's external-trainer protocol.

``fedmesh-node`` hands the training step to a program the site already trusts and keeps
everything else (identity, encryption, codecs, secure aggregation, the store). This
package is that program's whole API (docs/external-trainer.md)::

    import fedmesh
    with fedmesh.connect(num_examples=6000, name="pytorch") as site:
        for task in site.tasks():
            ...                       # task.weights: name -> read-only float32 array
            task.reply(weights=new_weights, num_examples=6000, metrics={"loss": 0.41})

numpy is the only dependency; ``fedmesh.torch`` maps weights to a PyTorch module and
needs PyTorch only when it is used.
"""

from __future__ import annotations

from .errors import ProtocolError
from .site import ENDPOINT_ENV, PROTOCOL, Site, connect
from .task import Task

__version__ = "0.1.0"
__all__ = ["connect", "Site", "Task", "ProtocolError", "PROTOCOL", "ENDPOINT_ENV", "__version__"]
