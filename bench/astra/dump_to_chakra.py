#!/usr/bin/python3
"""Writes moesim's activity dump (bench/replay/FORMAT.md) as Chakra execution traces, one file per
GPU (PREFIX.<gpu>.et), so that ASTRA-sim simulates the same task graph (docs/simulator.md, "ASTRA-sim
side by side").

    python3 bench/astra/dump_to_chakra.py DUMP OUT_PREFIX CHAKRA_PROTOBUF_DIR

CHAKRA_PROTOBUF_DIR holds et_def_pb2.py (ASTRA-sim's build compiles it from Chakra's
schema/protobuf/et_def.proto); this script ships no Chakra code. Mapping, per task of the dump:
- E (an execution of FLOPS on HOST): a COMP_NODE on HOST, duration_micros = FLOPS / speed in whole
  microseconds (Chakra's unit; rounded, so short computes move by up to 0.5 us each);
- C (a transfer SRC -> DST): a COMM_SEND_NODE on SRC and a COMM_RECV_NODE on DST, matched by a tag;
- J (a join): on every GPU that has some of its dependencies, a COMP_NODE of no time waiting for
  them there (Chakra has no join node).
A node depends on the nodes of its own GPU that stand for its dependencies: a transfer's send on the
source GPU's, its receive on the destination's. A dependency that has no node on that GPU (a step's
end, which joins every GPU, or a compute of another GPU) is dropped: Chakra's graphs are per GPU and
meet only through messages, so steps are not barriers there. That is the one difference between the
two task graphs; both simulators' step times are printed, so it shows.
"""
import os
import sys


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(0x80 | b)
        else:
            out.append(b)
            return bytes(out)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: dump_to_chakra.py DUMP OUT_PREFIX CHAKRA_PROTOBUF_DIR")
    dump, prefix, proto_dir = sys.argv[1:]
    sys.path.insert(0, proto_dir)
    import et_def_pb2 as pb  # noqa: E402  (ASTRA-sim's build generates it)

    speed = []
    tasks = {}  # id -> (kind, fields, deps)
    with open(dump) as f:
        for line in f:
            p = line.split()
            if not p or p[0].startswith("#"):
                continue
            kind = p[0]
            if kind == "moesim-activities" and p[1] != "3":
                sys.exit(f"{dump}: format version {p[1]}, this script reads 3")
            if kind == "host":
                speed.append(float(p[2]))
            elif kind == "E":
                n = int(p[4])
                tasks[int(p[1])] = ("E", (int(p[2]), float(p[3])), [int(x) for x in p[5:5 + n]])
            elif kind == "C":
                n = int(p[6])
                tasks[int(p[1])] = ("C", (int(p[2]), int(p[3]), int(p[4])), [int(x) for x in p[7:7 + n]])
            elif kind == "J":
                n = int(p[2])
                tasks[int(p[1])] = ("J", (), [int(x) for x in p[3:3 + n]])
    gpus = len(speed)
    # Node ids, per GPU, in task order: an execution has one node, a transfer two (send, receive).
    next_id = [0] * gpus
    node = {}  # task id -> {gpu: node id}
    for tid in sorted(tasks):
        kind, fields, _ = tasks[tid]
        if kind == "E":
            node[tid] = {fields[0]: next_id[fields[0]]}
            next_id[fields[0]] += 1
        elif kind == "C":
            src, dst, _ = fields
            node[tid] = {src: next_id[src], dst: next_id[dst]}
            next_id[src] += 1
            next_id[dst] += 1
    # A join becomes, on every GPU that has some of its dependencies, a compute of no time that
    # waits for them there (Chakra has no join node; without one every dependent would list all of
    # the join's dependencies, and a step's graph would grow quadratically).
    join_node = {}  # join id -> {gpu: node id}, made in task order (a join's deps may come later)

    def nodes_for(tid):
        if tid in node:
            return node[tid]
        return join_node.get(tid, {})

    def deps_on(gpu, deps):
        return sorted({nodes_for(d)[gpu] for d in deps if gpu in nodes_for(d)})

    # Resolve joins in dependency order (a join may name later joins and tasks).
    order = []
    state = {}
    for tid in sorted(tasks):
        if tasks[tid][0] != "J" or tid in state:
            continue
        stack = [(tid, False)]
        while stack:
            t, done = stack.pop()
            if done:
                state[t] = 2
                order.append(t)
                continue
            if state.get(t):
                continue
            state[t] = 1
            stack.append((t, True))
            for d in tasks[t][2]:
                if d in tasks and tasks[d][0] == "J" and not state.get(d):
                    stack.append((d, False))
    for tid in order:
        gpus_here = set()
        for d in tasks[tid][2]:
            if d in node:
                gpus_here.update(node[d])
            elif d in join_node:
                gpus_here.update(join_node[d])
        join_node[tid] = {}
        for g in sorted(gpus_here):
            join_node[tid][g] = next_id[g]
            next_id[g] += 1

    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    files = [open(f"{prefix}.{g}.et", "wb") for g in range(gpus)]

    def write(gpu, msg):
        data = msg.SerializeToString()
        files[gpu].write(varint(len(data)))
        files[gpu].write(data)

    for g in range(gpus):
        write(g, pb.GlobalMetadata(version="0.0.4"))
    count = {"E": 0, "C": 0, "J": 0}
    for tid in order:
        for g, nid in join_node[tid].items():
            n = pb.Node(id=nid, name=f"J{tid}", type=pb.COMP_NODE)
            n.duration_micros = 0
            n.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
            n.data_deps.extend(deps_on(g, tasks[tid][2]))
            write(g, n)
    for tid in sorted(tasks):
        kind, fields, deps = tasks[tid]
        count[kind] += 1
        if kind == "E":
            host, flops = fields
            n = pb.Node(id=node[tid][host], name=f"E{tid}", type=pb.COMP_NODE)
            n.duration_micros = int(round(flops / speed[host] * 1e6))
            n.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
            n.data_deps.extend(deps_on(host, deps))
            write(host, n)
        elif kind == "C":
            src, dst, size = fields
            tag = tid % (1 << 30)
            for gpu, typ, peer in ((src, pb.COMM_SEND_NODE, "comm_dst"), (dst, pb.COMM_RECV_NODE, "comm_src")):
                n = pb.Node(id=node[tid][gpu], name=f"C{tid}", type=typ)
                n.attr.extend([pb.AttributeProto(name="is_cpu_op", bool_val=False),
                               pb.AttributeProto(name=peer, int32_val=dst if typ == pb.COMM_SEND_NODE else src),
                               pb.AttributeProto(name="comm_size", int64_val=size),
                               pb.AttributeProto(name="comm_tag", int32_val=tag)])
                n.data_deps.extend(deps_on(gpu, deps))
                write(gpu, n)
    for fh in files:
        fh.close()
    print(f"{gpus} GPUs: {count['E']} computes, {count['C']} transfers, {count['J']} joins")


if __name__ == "__main__":
    main()
