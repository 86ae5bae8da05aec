#!/usr/bin/env python3
"""A link emulator in user space, for kernels without sch_netem (delay and loss).

Each host namespace gets a TAP device instead of a veth; this process opens every TAP (entering
the host's namespace to do so) and switches Ethernet frames between them like a learning bridge,
with each host's access link emulated in both directions:

  * rate: frames leave one at a time at RATE bits/s (a FIFO of at most QUEUE_MS worth of bytes;
    a frame that does not fit is dropped, as a full router queue drops it),
  * delay: DELAY_MS after it is serialised, plus uniform jitter in [0, JITTER_MS),
  * loss: each frame is dropped with probability LOSS (an independent draw per link crossing).

A frame from host A to host B crosses A's uplink then B's downlink, so the one-way delay
between two hosts is DELAY_MS(A) + DELAY_MS(B), as with netem on both ends of each veth.
Frame order is kept per link (jitter does not reorder). TCP sees real loss and delay.

Usage (as root, the namespaces and TAP devices made beforehand; see federation.sh):
  linkem.py --port NS:TAP[:DELAY_MS:LOSS:RATE_MBIT] ... [--jitter-ms J] [--queue-ms Q] [--seed S]
It runs until killed (SIGTERM) and prints per-port counters to stderr when it stops.
"""
import argparse
import ctypes
import fcntl
import heapq
import os
import random
import select
import signal
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000

libc = ctypes.CDLL(None, use_errno=True)


def open_tap(ns, name):
    """Attaches to the persistent TAP `name` in network namespace `ns`."""
    here = os.open("/proc/self/ns/net", os.O_RDONLY)
    there = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    finally:
        if libc.setns(here, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")
        os.close(here)
        os.close(there)
    return fd


class Link:
    """One direction of a host's access link: rate, delay, jitter, loss, a bounded queue."""

    def __init__(self, delay_s, jitter_s, loss, rate_bps, queue_s, rng):
        self.delay_s, self.jitter_s, self.loss, self.rate_bps = delay_s, jitter_s, loss, rate_bps
        self.queue_bytes = max(64 * 1024, rate_bps / 8 * queue_s) if rate_bps > 0 else float("inf")
        self.free_at = 0.0     # when the last accepted frame finishes serialising
        self.last_out = 0.0    # arrival time of the last frame: jitter never reorders
        self.rng = rng
        self.frames = self.lost = self.overflow = 0

    def cross(self, now, size):
        """The time the frame is out at the far end, or None when it is dropped."""
        start = max(now, self.free_at)
        if self.rate_bps > 0 and (start - now) * self.rate_bps / 8 > self.queue_bytes:
            self.overflow += 1
            return None
        if self.loss > 0 and self.rng.random() < self.loss:
            self.lost += 1
            return None
        tx = size * 8 / self.rate_bps if self.rate_bps > 0 else 0.0
        self.free_at = start + tx
        out = self.free_at + self.delay_s + (self.rng.random() * self.jitter_s if self.jitter_s else 0.0)
        out = max(out, self.last_out)
        self.last_out = out
        self.frames += 1
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", action="append", required=True,
                    help="NS:TAP[:DELAY_MS:LOSS:RATE_MBIT] (LOSS a probability, 0.01 = 1%%; RATE 0 = unlimited)")
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--queue-ms", type=float, default=200.0, help="queue per link, in time at its rate")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)

    ports = []  # (name, fd, up Link, down Link)
    for spec in a.port:
        f = spec.split(":")
        ns, tap = f[0], f[1]
        delay_ms = float(f[2]) if len(f) > 2 else 0.0
        loss = float(f[3]) if len(f) > 3 else 0.0
        rate = float(f[4]) * 1e6 if len(f) > 4 else 0.0
        mk = lambda: Link(delay_ms / 1000, a.jitter_ms / 1000, loss, rate, a.queue_ms / 1000, rng)
        ports.append((f"{ns}/{tap}", open_tap(ns, tap), mk(), mk()))

    fd_port = {p[1]: i for i, p in enumerate(ports)}
    mac_port = {}
    pending = []  # heap of (time, seq, port index, frame)
    seq = 0
    poller = select.epoll()
    for _, fd, _, _ in ports:
        poller.register(fd, select.EPOLLIN)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print("linkem: switching " + ", ".join(p[0] for p in ports), file=sys.stderr, flush=True)

    while not stop:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, dst, frame = heapq.heappop(pending)
            try:
                os.write(ports[dst][1], frame)
            except BlockingIOError:
                pass  # the host's receive queue is full: dropped, as a NIC would
        timeout = max(0.0, pending[0][0] - now) if pending else 0.5
        try:
            events = poller.poll(min(timeout, 0.5))
        except InterruptedError:
            continue
        now = time.monotonic()
        for fd, _ in events:
            src = fd_port[fd]
            for _ in range(256):
                try:
                    frame = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if len(frame) < 14:
                    continue
                dst_mac, src_mac = frame[0:6], frame[6:12]
                mac_port[src_mac] = src
                at_switch = ports[src][2].cross(now, len(frame))
                if at_switch is None:
                    continue
                if dst_mac[0] & 1 or dst_mac not in mac_port:
                    targets = [i for i in range(len(ports)) if i != src]
                else:
                    targets = [mac_port[dst_mac]]
                for dst in targets:
                    if dst == src:
                        continue
                    out = ports[dst][3].cross(at_switch, len(frame))
                    if out is not None:
                        heapq.heappush(pending, (out, seq, dst, frame))
                        seq += 1

    for name, _, up, down in ports:
        print(f"linkem: {name}: up {up.frames} frames ({up.lost} lost, {up.overflow} queue drops), "
              f"down {down.frames} frames ({down.lost} lost, {down.overflow} queue drops)", file=sys.stderr)


if __name__ == "__main__":
    main()
