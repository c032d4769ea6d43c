"""Ring attention (context parallelism) on several GPUs: speed, hidden communication, balance, memory.

Launch one process per GPU:

    PYTHONPATH=. torchrun --nproc_per_node=2 benchmarks/bench_ring.py --out DIR

Default problem: B=1, H=32 (MHA), d=128, bf16, causal, zigzag sharding,
sequences of 64k..512k tokens in total.  Per sequence length it measures,
on every rank (CUDA events, median of the repetitions, a barrier before each):

* ring: ``ring_flash_attn_func`` forward + backward, the real thing;
* local: the same blocks on the same shapes with communication disabled (each
  rank attends its own K/V shard in place of the one it would receive), i.e.
  the compute alone;
* comm: the same sequence of K/V (and dK/dV) transfers with no compute;
* stall: inside one ring run, how long the compute stream waited on each
  transfer (events recorded right before and after each wait);
* contiguous: the local variant with contiguous instead of zigzag shards, to
  show the imbalance zigzag removes;
* one GPU: ``flash_attn_func`` on the whole sequence, where it fits (and time allows).

Hidden communication: 1 - stall / comm (per rank, the worst rank reported),
and end to end: (local + comm - ring) / comm with each term the max over
ranks.  Per-rank balance: max / min of the local times.  Memory: peak
``torch.cuda.max_memory_allocated`` of a forward + backward, inputs included.

Writes bench_ring.json and bench_ring.md into --out.  NVLink multicast stays
off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are set here before the process group starts.
``--cpu-smoke`` runs the plumbing on CPU with gloo and tiny sizes.
"""

from __future__ import annotations

import os

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NVLS_OFF)

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as C  # noqa: E402

DEFAULT_SEQLENS = "64k,128k,256k,512k"


def parse_seqlens(text: str) -> list:
    out = []
    for tok in text.split(","):
        tok = tok.strip().lower()
        out.append(int(tok[:-1]) * 1024 if tok.endswith("k") else int(tok))
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=C.REPO_ROOT / "benchmarks" / "results" / "h200x2",
                   help="results folder (default: %(default)s)")
    p.add_argument("--seqlens", default=DEFAULT_SEQLENS, help="total tokens, all ranks (default: %(default)s)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=None, help="default: --heads (MHA)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--target-seconds", type=float, default=5.0,
                   help="time per measured variant: sets the repetitions (2..10)")
    p.add_argument("--single-max", default="512k", help="largest total length run on one GPU")
    p.add_argument("--no-contiguous", action="store_true", help="skip the contiguous-sharding variant")
    p.add_argument("--max-seconds", type=float, default=480.0,
                   help="stop starting new work when the predicted time would exceed this")
    p.add_argument("--max-ctas", type=int, default=0,
                   help="run the ring on a process group whose NCCL communicator uses at most this many "
                        "CTAs (ProcessGroupNCCL.Options().config.max_ctas); 0: NCCL's default")
    p.add_argument("--high-priority", action="store_true",
                   help="run the ring on a process group whose NCCL stream has high priority "
                        "(ProcessGroupNCCL.Options().is_high_priority_stream)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    p.add_argument("--cpu-smoke", action="store_true", help="gloo on CPU, tiny sizes: tests the plumbing")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- timing


class Timer:
    """Wall time of a region on this rank: CUDA events on the GPU, perf_counter on CPU."""

    def __init__(self, device):
        import torch
        self.cuda = device.type == "cuda"
        self.torch = torch

    def __enter__(self):
        if self.cuda:
            self.t0 = self.torch.cuda.Event(enable_timing=True)
            self.t1 = self.torch.cuda.Event(enable_timing=True)
            self.t0.record()
        else:
            self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.t1.record()
            self.t1.synchronize()
            self.ms = self.t0.elapsed_time(self.t1)
        else:
            self.ms = (time.perf_counter() - self.start) * 1e3


def measure_alternating(fns, reps: int, device) -> list:
    """Per-repetition ms of each of ``fns``, run in turn within every round
    (ring, local, ring, local, ...), so that clock or thermal drift over the
    run weighs on each alike; all ranks start each run at once."""
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            times[i] += measure(fn, 1, device)
    return times


def measure(fn, reps: int, device, together: bool = True) -> list:
    """Per-repetition ms of fn on this rank; with ``together`` all ranks start
    each repetition at once (a barrier), otherwise no collective is involved."""
    import torch
    import torch.distributed as dist
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if together:
            dist.barrier()
        with Timer(device) as t:
            fn()
        times.append(t.ms)
    return times


# --------------------------------------------------------------------------- communicators


class LocalComm:
    """No communication: 'receives' the tensors it was given (same shapes, so the same work)."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size

    def exchange(self, tensors):
        class Done:
            def wait(self_inner):
                return list(tensors)
        return Done()


def stall_timed_comm(group, device):
    """A RingComm that records how long the compute stream waits on each transfer."""
    import torch
    from flashattn_triton.distributed.ring import RingComm

    class StallTimedComm(RingComm):
        def __init__(self):
            super().__init__(group)
            self.marks = []  # (before, after) per wait: events on CUDA, seconds on CPU

        def exchange(self, tensors):
            pending, marks, cuda = super().exchange(tensors), self.marks, device.type == "cuda"

            class Timed:
                def wait(self_inner):
                    if cuda:
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        a.record()
                        out = pending.wait()
                        b.record()
                    else:
                        a = time.perf_counter()
                        out = pending.wait()
                        b = time.perf_counter()
                    marks.append((a, b))
                    return out
            return Timed()

        def stall_ms(self) -> float:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                return sum(a.elapsed_time(b) for a, b in self.marks)
            return sum(b - a for a, b in self.marks) * 1e3

    return StallTimedComm()


# --------------------------------------------------------------------------- variants


def ring_api(q, k, v, do, sharding, group=None):
    from flashattn_triton.distributed import ring_flash_attn_func

    def fn():
        out = ring_flash_attn_func(q, k, v, group, causal=True, sharding=sharding)
        out.backward(do)
        q.grad = k.grad = v.grad = None
    return fn


def ring_internal(q, k, v, do, comm, sharding):
    """The ring without autograd, on any communicator (same blocks as ring_api)."""
    from flashattn_triton.distributed.ring import ring_attention_backward, ring_attention_forward
    scale = q.shape[-1] ** -0.5

    def fn():
        out, lse = ring_attention_forward(q, k, v, comm, scale, True, sharding)
        ring_attention_backward(do, q, k, v, out, lse, comm, scale, True, sharding)
    return fn


def comm_only(k, v, comm):
    """The transfers of one forward + backward (ring.py's order), with no compute:
    forward: P-1 K/V hops; backward: a K/V hop at steps 0..P-2, a float32
    dK/dV hop at steps 2..P (batched with the K/V hop when both happen)."""
    import torch
    world_size = comm.world_size

    def fn():
        kv = [k, v]
        for _ in range(world_size - 1):
            kv = comm.exchange(kv).wait()
        kv = [k, v]
        acc = [torch.zeros(k.shape, dtype=torch.float32, device=k.device),
               torch.zeros(v.shape, dtype=torch.float32, device=v.device)]
        for s in range(world_size + 1 if world_size > 1 else 1):
            send = (kv if s + 1 < world_size else []) + (acc if s >= 2 else [])
            if not send:
                continue
            got = comm.exchange(send).wait()
            if s + 1 < world_size:
                kv, got = got[:2], got[2:]
            if s >= 2:
                acc = got
    return fn


def single_gpu(q, k, v, do):
    from flashattn_triton import flash_attn_func

    def fn():
        out = flash_attn_func(q, k, v, causal=True)
        out.backward(do)
        q.grad = k.grad = v.grad = None
    return fn


# --------------------------------------------------------------------------- the run


def median(xs):
    return statistics.median(xs) if xs else None


def main(argv=None) -> int:
    args = parse_args(argv)
    seqlens = parse_seqlens(args.seqlens)
    single_max = parse_seqlens(args.single_max)[0]
    h_kv = args.kv_heads or args.heads
    if args.cpu_smoke:
        seqlens, args.heads, h_kv, args.head_dim = [256, 512], 4, 2, 32
    if args.dry_run:
        for n in seqlens:
            print(f"N={C.n_label(n)} B={args.batch} H={args.heads}/{h_kv} d={args.head_dim} {args.dtype} causal: "
                  f"ring, local (no comm), comm only, stall, "
                  f"{'' if args.no_contiguous else 'contiguous local, '}"
                  f"{'one GPU' if n <= single_max else 'no one-GPU run'}")
        return 0
    if "RANK" not in os.environ:
        sys.exit("launch with torchrun, e.g.: PYTHONPATH=. torchrun --nproc_per_node=2 benchmarks/bench_ring.py")
    if not args.cpu_smoke:
        C.require_cuda("bench_ring.py")

    import torch
    import torch.distributed as dist
    from flashattn_triton.distributed import shard_sequence

    if args.cpu_smoke:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
    else:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=10), device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    group = None  # the default group
    if (args.max_ctas or args.high_priority) and not args.cpu_smoke:
        # A communicator of its own: transfers on at most max_ctas multiprocessors, and/or
        # on a high-priority stream (its blocks are scheduled ahead of queued attention blocks).
        opts = dist.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = args.high_priority
        if args.max_ctas:
            opts.config.max_ctas = args.max_ctas
        group = dist.new_group(list(range(world_size)), backend="nccl", pg_options=opts)
    dtype = C.torch_dtype(args.dtype)
    budget = C.Budget(args.max_seconds)
    env = C.collect_env() if rank == 0 else {}
    if rank == 0:
        env["world_size"] = world_size
        env["nvls_off"] = {k: os.environ.get(k) for k in NVLS_OFF}
        env["nccl_env"] = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        env["max_ctas"] = args.max_ctas or "NCCL default"
        env["nccl_high_priority_stream"] = args.high_priority and not args.cpu_smoke
        print(f"bench_ring: {world_size} ranks, {C.env_line(env)}", flush=True)

    def gather(x):
        out = [None] * world_size
        dist.all_gather_object(out, x)
        return out

    def agree(x):  # rank 0's value everywhere: every rank takes the same branches
        box = [x]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gib(nbytes):
        return nbytes / 2**30

    def reset_peak():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    def peak_gib():
        return gib(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None

    rows = []
    prev = None  # (seqlen, ring ms) to predict the next size
    for n in seqlens:
        row = dict(seqlen=n, batch=args.batch, heads_q=args.heads, heads_kv=h_kv, head_dim=args.head_dim,
                   dtype=args.dtype, causal=True, sharding="zigzag", world_size=world_size, skipped=[])
        if n % (2 * world_size):
            row["error"] = f"seqlen {n} not divisible by 2 * world_size"
            rows.append(row)
            continue
        if prev is not None:
            predicted = prev[1] / 1e3 * (n / prev[0]) ** 2 * 15  # ~15 ring-equivalents per size
            if agree(budget.elapsed() + predicted > args.max_seconds):
                row["error"] = f"skipped: predicted {predicted:.0f} s exceeds the time budget"
                rows.append(row)
                continue
        torch.manual_seed(rank)
        n_local = n // world_size

        def rand(h):
            return torch.randn(args.batch, n_local, h, args.head_dim, device=device, dtype=dtype)

        try:
            q, k, v, do = rand(args.heads).requires_grad_(), rand(h_kv).requires_grad_(), \
                rand(h_kv).requires_grad_(), rand(args.heads)
            flops_total = C.attn_flops(args.batch, args.heads, n, n, args.head_dim, True, "fwd_bwd")

            # ring, through the public API: one warm-up (compiles), then the repetitions
            fn = ring_api(q, k, v, do, "zigzag", group)
            if prev is None:  # the first size also compiles the kernels: one more warm-up
                measure(fn, 1, device)
            warm = max(gather(measure(fn, 1, device)[0]))
            reps = agree(max(2, min(10, int(args.target_seconds * 1e3 / max(warm, 1e-3)))))
            row["reps"] = reps
            # local: the same blocks with no communication, timed alternately with the ring
            local = ring_internal(q.detach(), k.detach(), v.detach(), do, LocalComm(rank, world_size), "zigzag")
            measure(local, 1, device)
            reset_peak()
            ring_times, local_times = measure_alternating([fn, local], reps, device)
            ring_ms = gather(median(ring_times))
            row["ring_peak_gib_per_rank"] = gather(peak_gib())
            row["ring_ms_per_rank"] = ring_ms
            row["ring_ms"] = max(ring_ms)
            row["tflops_per_gpu"] = flops_total / world_size / (row["ring_ms"] * 1e-3) / 1e12
            prev = (n, row["ring_ms"])

            # stall: the same ring (no autograd) with timed waits
            comm = stall_timed_comm(group, device)
            stall_fn = ring_internal(q.detach(), k.detach(), v.detach(), do, comm, "zigzag")
            stall_times = measure(stall_fn, 1, device)
            row["ring_internal_ms_per_rank"] = gather(stall_times[0])
            row["stall_ms_per_rank"] = gather(comm.stall_ms())

            local_ms = gather(median(local_times))
            row["local_ms_per_rank"] = local_ms
            row["local_ms"] = max(local_ms)
            row["balance_max_over_min"] = max(local_ms) / min(local_ms)

            # comm alone
            from flashattn_triton.distributed.ring import RingComm
            comm_fn = comm_only(k.detach(), v.detach(), RingComm(group))
            measure(comm_fn, 1, device)
            comm_ms = gather(median(measure(comm_fn, max(reps, 5), device)))
            row["comm_ms_per_rank"] = comm_ms
            row["comm_ms"] = max(comm_ms)
            row["hidden_stall"] = min(1.0 - s / c for s, c in zip(row["stall_ms_per_rank"], comm_ms))
            row["hidden_end_to_end"] = (row["local_ms"] + row["comm_ms"] - row["ring_ms"]) / row["comm_ms"]
            row["exposed_ms"] = row["ring_ms"] - row["local_ms"]

            # contiguous shards, no communication: the imbalance zigzag removes
            contig = None
            if args.no_contiguous:
                row["skipped"].append("contiguous")
            elif agree(budget.elapsed() + row["local_ms"] / 1e3 * 2 * reps > args.max_seconds):
                row["skipped"].append("contiguous (time budget)")
            else:
                contig = ring_internal(q.detach(), k.detach(), v.detach(), do, LocalComm(rank, world_size),
                                       "contiguous")
                c_ms = gather(median(measure(contig, reps, device)))
                row["contiguous_local_ms_per_rank"] = c_ms
                row["contiguous_balance_max_over_min"] = max(c_ms) / min(c_ms)
            q = k = v = do = fn = stall_fn = local = comm_fn = contig = comm = None  # free before the 1-GPU run
            C.free_cuda_memory()

            # one GPU, the whole sequence (every rank runs it on its own GPU at once)
            need = 9 * args.batch * n * args.heads * args.head_dim * torch.finfo(dtype).bits // 8
            free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else float("inf")
            predicted = row["ring_ms"] / 1e3 * world_size * (reps + 2)
            if n > single_max:
                row["skipped"].append("one GPU (--single-max)")
            elif not agree(need < 0.9 * free):
                row["skipped"].append(f"one GPU (needs ~{gib(need):.0f} GiB)")
            elif agree(budget.elapsed() + predicted > args.max_seconds):
                row["skipped"].append("one GPU (time budget)")
            else:
                # No collective inside: a failure here (e.g. out of memory) stays on its rank.
                single = {}
                try:
                    torch.manual_seed(0)
                    qf, kf, vf, dof = (torch.randn(args.batch, n, h, args.head_dim, device=device, dtype=dtype)
                                       for h in (args.heads, h_kv, h_kv, args.heads))
                    qf, kf, vf = (t.requires_grad_() for t in (qf, kf, vf))
                    one = single_gpu(qf, kf, vf, dof)
                    measure(one, 1, device, together=False)
                    reset_peak()
                    single = dict(ms=median(measure(one, reps, device, together=False)), gib=peak_gib())
                except Exception as exc:  # noqa: BLE001
                    single = dict(error=C.short_error(exc))
                qf = kf = vf = dof = one = None
                C.free_cuda_memory()
                single = gather(single)[0]  # rank 0's GPU
                if "error" in single:
                    row["skipped"].append(f"one GPU failed: {single['error']}")
                else:
                    row["single_ms"], row["single_peak_gib"] = single["ms"], single["gib"]
                    row["speedup_vs_single"] = row["single_ms"] / row["ring_ms"]
        except Exception as exc:  # noqa: BLE001 - record and stop: a rank may be out of step
            row["error"] = C.short_error(exc)
            rows.append(row)
            print(f"rank {rank}: N={n}: {row['error']}", flush=True)
            break
        rows.append(row)
        if rank == 0:
            print(f"N={C.n_label(n)}: ring {row['ring_ms']:.1f} ms, local {row['local_ms']:.1f} ms, comm "
                  f"{row['comm_ms']:.2f} ms, hidden {100 * row['hidden_stall']:.1f}% (stall) / "
                  f"{100 * row['hidden_end_to_end']:.1f}% (end to end), balance "
                  f"{row['balance_max_over_min']:.3f}, one GPU {row.get('single_ms')} ms, "
                  f"elapsed {budget.elapsed():.0f} s", flush=True)

    if rank == 0:
        payload = dict(env=env, args={k: str(v) for k, v in vars(args).items()}, rows=rows)
        C.write_json(args.out / "bench_ring.json", payload)
        write_report(args.out / "bench_ring.md", env, rows, world_size)
        print(f"wrote {args.out / 'bench_ring.json'} and {args.out / 'bench_ring.md'}", flush=True)
        print((args.out / "bench_ring.md").read_text(), flush=True)
    dist.destroy_process_group()
    return 0


def _f(x, digits=1, scale=1.0, suffix=""):
    return "" if x is None else f"{x * scale:.{digits}f}{suffix}"


def write_report(path: Path, env: dict, rows: list, world_size: int) -> None:
    ok = [r for r in rows if "ring_ms" in r]
    head = ["N", "ring fwd+bwd ms", "TFLOP/s per GPU", "local only ms", "comm alone ms", "exposed ms",
            "hidden (stall)", "hidden (end to end)", "rank balance max/min", "contiguous max/min",
            "peak GiB per GPU", "1 GPU ms", "1 GPU GiB", "speed-up vs 1 GPU"]
    table = []
    for r in ok:
        peaks = [p for p in r.get("ring_peak_gib_per_rank", []) if p is not None]
        table.append([C.n_label(r["seqlen"]), _f(r["ring_ms"]), _f(r["tflops_per_gpu"], 0), _f(r["local_ms"]),
                      _f(r["comm_ms"], 2), _f(r["exposed_ms"], 2), _f(r["hidden_stall"], 1, 100, "%"),
                      _f(r["hidden_end_to_end"], 1, 100, "%"), _f(r["balance_max_over_min"], 3),
                      _f(r.get("contiguous_balance_max_over_min"), 2), _f(max(peaks) if peaks else None, 1),
                      _f(r.get("single_ms")), _f(r.get("single_peak_gib"), 1), _f(r.get("speedup_vs_single"), 2)])
    cfg = rows[0] if rows else {}
    short = (f"Ring attention over {world_size} GPUs, B={cfg.get('batch')}, H={cfg.get('heads_q')}/"
             f"{cfg.get('heads_kv')}, d={cfg.get('head_dim')}, {cfg.get('dtype')}, causal, zigzag shards; "
             f"forward + backward, median over the repetitions, the slowest rank; NCCL CTAs: "
             f"{env.get('max_ctas', 'NCCL default')}, high-priority NCCL stream: "
             f"{env.get('nccl_high_priority_stream', False)}.\n\n" + C.md_table(head, table))
    notes = [r for r in rows if r.get("error") or r.get("skipped")]
    per_rank = [[C.n_label(r["seqlen"]), " / ".join(_f(x) for x in r["ring_ms_per_rank"]),
                 " / ".join(_f(x) for x in r["local_ms_per_rank"]),
                 " / ".join(_f(x) for x in r.get("contiguous_local_ms_per_rank", [])),
                 " / ".join(_f(x, 2) for x in r["comm_ms_per_rank"]),
                 " / ".join(_f(x, 2) for x in r["stall_ms_per_rank"]), r["reps"]] for r in ok]
    details = (
        "Columns: *local only* runs the same blocks with communication disabled (each rank attends its own "
        "K/V shard in place of the received one), timed alternately with the ring, run for run; *comm alone* runs the same transfers with no compute; "
        "*exposed* = ring - local; *hidden (stall)* = 1 - (time the compute stream waited on transfers "
        "inside a ring run) / comm alone, worst rank (a wait also lasts while a slower neighbour finishes its step, so imbalance counts against it); *hidden (end to end)* = (local + comm - ring) / comm, "
        "which also charges any slowdown of the kernels by the concurrent transfers and is noisy when comm "
        "is small next to the compute; *rank balance* = slowest / fastest rank of the local-only run; "
        "*contiguous* = the same with contiguous shards (rank P-1 does P times the work of rank 0); "
        "*peak* = torch.cuda.max_memory_allocated over a forward + backward, inputs included.\n\n"
        "Per rank (ms, rank 0 / rank 1 / ...):\n\n"
        + C.md_table(["N", "ring", "local", "contiguous local", "comm alone", "stall", "reps"], per_rank))
    if notes:
        details += "\n\nSkipped or failed:\n\n" + "\n".join(
            f"- N={C.n_label(r['seqlen'])}: " + "; ".join(filter(None, [r.get("error"), ", ".join(r["skipped"])]))
            for r in notes)
    C.write_markdown(path, "Ring attention: context parallelism over GPUs", env, short, details)


if __name__ == "__main__":
    sys.exit(main())
