#!/usr/bin/python3
"""Candidate fast paths for an all-to-all phase, against exact max-min sharing (issue: large clusters).

    /usr/bin/python3 bench/phase_models.py            # prints the table in docs/simulator.md, "Scale"

Needs numpy (Debian: apt-get install python3-numpy). One MoE dispatch phase on 64 GPUs (8 nodes of 8,
NVLink switch inside a node, one NIC per GPU on a non-blocking network), DeepSeek-V3's shape (256
experts, top-8, 7,392-byte FP8 tokens, contiguous placement: 4 experts per GPU), tokens routed by a
Zipf popularity (the trace generator's exponent; 0: uniform), every flow ready at once, latencies left
out. Each GPU has four resources: NVLink port up and down (0.82 x 450 GB/s), network port up and
down (0.97 x 50 GB/s); a flow inside a node uses the first two, across nodes the other two.

- exact: max-min sharing re-solved at every completion (what moesim's flow fidelity does with
  SimGrid), by progressive filling;
- bound: a destination has all its tokens when its own port has moved everything sent to it and
  every GPU sending to it has sent everything it sends (one activity per port: what a per-port fast
  path computes);
- two-sided PS: each flow ends when the later of its two ports, each shared equally by its own flows
  alone (processor sharing), would have moved it.

Columns: flows; completion events of the exact solution (distinct instants); the phase's end (the
last destination's arrival) and the per-destination arrival errors, model / exact - 1.
"""
import sys

import numpy as np

GPUS, PER_NODE, EXPERTS, TOP_K = 64, 8, 256, 8
TOKEN = 7168 * (1 + 4 / 128)
NVLINK, NIC = 450e9 * 0.82, 50e9 * 0.97


def routing(seed, tokens_per_gpu, zipf):
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, EXPERTS + 1) ** zipf
    rng.shuffle(pop)
    pop /= pop.sum()
    count = np.zeros((GPUS, GPUS))
    for s in range(GPUS):
        for _ in range(tokens_per_gpu):
            for d in {int(e) // (EXPERTS // GPUS) for e in rng.choice(EXPERTS, TOP_K, replace=False, p=pop)}:
                if d != s:
                    count[s, d] += 1
    return count * TOKEN


def phase(size):
    src, dst = np.nonzero(size)
    b = size[src, dst]
    inter = (src // PER_NODE) != (dst // PER_NODE)
    up = np.where(inter, 2 * GPUS + src, src)
    down = np.where(inter, 3 * GPUS + dst, GPUS + dst)
    cap = np.concatenate([np.full(2 * GPUS, NVLINK), np.full(2 * GPUS, NIC)])
    return src, dst, b, up, down, cap


def exact(b, up, down, cap):
    """Completion time of every flow under max-min sharing, and the number of distinct completion instants."""
    left, t, done, active, events = b.copy(), 0.0, np.zeros(len(b)), np.ones(len(b), bool), 0
    while active.any():
        idx = np.nonzero(active)[0]
        rate, rem, free = np.zeros(len(b)), cap.copy(), np.ones(len(idx), bool)
        while free.any():
            u = idx[free]
            n = np.bincount(up[u], minlength=len(cap)) + np.bincount(down[u], minlength=len(cap))
            with np.errstate(divide="ignore", invalid="ignore"):
                level = np.where(n > 0, rem / n, np.inf)
            r = int(level.argmin())
            hit = free & ((up[idx] == r) | (down[idx] == r))
            f = idx[hit]
            rate[f] = level[r]
            np.subtract.at(rem, up[f], level[r])
            np.subtract.at(rem, down[f], level[r])
            rem[r] = 0.0
            free &= ~hit
        dt = np.min(left[idx] / rate[idx])
        t += dt
        events += 1
        left[idx] -= rate[idx] * dt
        fin = active & (left <= 1e-9 * b)
        done[fin] = t
        active &= ~fin
    return done, events


def processor_sharing(b, res, cap):
    t = np.zeros(len(b))
    for r in np.unique(res):
        f = np.nonzero(res == r)[0]
        order = f[np.argsort(b[f])]
        x = b[order]
        before = np.concatenate([[0.0], np.cumsum(x)[:-1]])
        t[order] = (before + (len(x) - np.arange(len(x))) * x) / cap[r]
    return t


def arrivals(dst, finish):
    a = np.zeros(GPUS)
    np.maximum.at(a, dst, finish)
    return a


def main():
    cases = [(1, 32, 1.0), (2, 32, 1.0), (1, 128, 1.0), (1, 512, 1.0), (1, 32, 0.0), (1, 512, 0.0)]
    print("| tokens/GPU | Zipf | seed | flows | exact events | exact end us | model | end | mean arrival | worst arrival |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for seed, tokens, zipf in cases:
        src, dst, b, up, down, cap = phase(routing(seed, tokens, zipf))
        done, events = exact(b, up, down, cap)
        ref = arrivals(dst, done)
        load = (np.bincount(up, weights=b, minlength=len(cap)) + np.bincount(down, weights=b, minlength=len(cap))) / cap
        bound = arrivals(dst, np.maximum(load[up], load[down]))
        ps = arrivals(dst, np.maximum(processor_sharing(b, up, cap), processor_sharing(b, down, cap)))
        for name, a in (("bound", bound), ("two-sided PS", ps)):
            has = ref > 0
            e = a[has] / ref[has] - 1
            print(f"| {tokens} | {zipf:.1f} | {seed} | {len(b)} | {events} | {ref.max() * 1e6:.1f} | {name} "
                  f"| {100 * (a.max() / ref.max() - 1):+.2f}% | {100 * (a[has].mean() / ref[has].mean() - 1):+.1f}% "
                  f"| {100 * np.abs(e).max():.1f}% |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
