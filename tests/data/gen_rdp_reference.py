#!/usr/bin/env python3
"""Writes the reference values that tests/crypto/rdp_accountant_test.cc checks against.

The values come from Google's dp-accounting (pip package `dp-accounting`), the library
whose RdpAccountant crypto/dp/rdp_accountant.h reimplements. This script is a developer
tool only: fedmesh itself never runs Python. To regenerate:

  python3 -m venv /tmp/dpvenv && /tmp/dpvenv/bin/pip install dp-accounting
  /tmp/dpvenv/bin/python tests/data/gen_rdp_reference.py

It writes two files next to itself:
  rdp_reference.csv         epsilon and the optimal order for (q, sigma, steps, delta),
                            each from RdpAccountant() with its default orders after
                            composing SelfComposedDpEvent(PoissonSampledDpEvent(q,
                            GaussianDpEvent(sigma)), steps).
  rdp_reference_orders.csv  the RDP of ONE sampled Gaussian step at every default order,
                            for a few (q, sigma). Epsilon only exercises the optimal order;
                            this checks the fractional-order series and the integer closed
                            form everywhere, including orders near 1.
Floats are written with repr(), which round-trips exactly. dp-accounting's series for
fractional orders gives up after 1000 terms at small orders when q is large (it logs a
warning per order and returns inf there, which excludes that order); those infs are part
of the reference, so the warnings are silenced here.
"""

import datetime
import importlib.metadata
import os

from absl import logging
import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant

HERE = os.path.dirname(os.path.abspath(__file__))

# (q, sigma, steps, delta). Spans q from 1e-3 to 1 (q = 1 is the plain Gaussian), sigma
# from 0.5 to 10, steps from 1 to 1e5 and delta from 1e-5 to 1e-8. Several rows are
# DP-SGD settings people actually use (MNIST: q = 256/60000; CIFAR-10: q = 256/50000).
EPSILON_GRID = [
    (1e-3, 0.5, 1, 1e-5),
    (1e-3, 1.0, 1000, 1e-5),
    (1e-3, 1.1, 100000, 1e-6),
    (1e-3, 10.0, 100000, 1e-8),
    (256 / 60000, 1.1, 14040, 1e-5),
    # Issue 27's DP-SGD runs (fedmesh-node --local-only, batch 256 on Fashion-MNIST, sigma 1):
    # one epoch (the budget test), 8 epochs (the CI test) and 15 epochs (examples).
    (256 / 60000, 1.0, 235, 1e-5),
    (256 / 60000, 1.0, 1880, 1e-5),
    (256 / 60000, 1.0, 3525, 1e-5),
    (256 / 60000, 1.12, 14062, 1e-5),
    (256 / 50000, 1.5, 19531, 1e-5),
    (0.01, 0.5, 10, 1e-5),
    (0.01, 0.8, 1000, 1e-6),
    (0.01, 2.0, 10000, 1e-7),
    (0.01, 4.0, 100000, 1e-8),
    (0.05, 0.7, 100, 1e-5),
    (0.05, 1.3, 5000, 1e-6),
    (0.1, 1.0, 1, 1e-5),
    (0.1, 3.0, 10000, 1e-8),
    (0.5, 0.9, 10, 1e-5),
    (0.5, 5.0, 1000, 1e-7),
    (1.0, 0.5, 1, 1e-5),
    (1.0, 1.0, 1, 1e-6),
    (1.0, 2.0, 100, 1e-5),
    (1.0, 10.0, 100000, 1e-8),
]

# (q, sigma) for the per-order table: small q with small and large sigma (the fractional
# series' two regimes), a moderate q, and q = 1.
ORDERS_GRID = [
    (1e-3, 0.5),
    (256 / 60000, 1.1),
    (0.01, 4.0),
    (0.1, 0.8),
    (0.5, 2.0),
    (1.0, 1.5),
]


def epsilon(q, sigma, steps, delta):
  accountant = rdp_privacy_accountant.RdpAccountant()
  event = dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
  accountant.compose(event)
  eps, order = accountant.get_epsilon_and_optimal_order(delta)
  return float(eps), float(order)


def header():
  version = importlib.metadata.version("dp-accounting")
  today = datetime.date.today().isoformat()
  return (f"# Generated {today} by tests/data/gen_rdp_reference.py with dp-accounting "
          f"{version} (RdpAccountant, default orders). Do not edit by hand.\n")


def main():
  logging.set_verbosity(logging.ERROR)
  with open(os.path.join(HERE, "rdp_reference.csv"), "w") as f:
    f.write(header())
    f.write("q,noise_multiplier,steps,delta,epsilon,order\n")
    for q, sigma, steps, delta in EPSILON_GRID:
      eps, order = epsilon(q, sigma, steps, delta)
      f.write(f"{q!r},{sigma!r},{steps},{delta!r},{eps!r},{order!r}\n")

  orders = rdp_privacy_accountant.DEFAULT_RDP_ORDERS
  with open(os.path.join(HERE, "rdp_reference_orders.csv"), "w") as f:
    f.write(header())
    f.write("q,noise_multiplier,order,rdp\n")
    for q, sigma in ORDERS_GRID:
      accountant = rdp_privacy_accountant.RdpAccountant()
      accountant.compose(
          dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
      # _rdp is private; it is the only way to read the per-order values back.
      for order, rdp in zip(orders, accountant._rdp):  # pylint: disable=protected-access
        f.write(f"{q!r},{sigma!r},{float(order)!r},{float(rdp)!r}\n")


if __name__ == "__main__":
  main()
