#!/usr/bin/env python3
"""Soak: a daemon (host backend) under rounds of collective jobs with random
client kills, for a set time; every minute its descriptors, memfds, threads
and RSS are sampled (and plotted).

Each group runs rounds back to back: WORLD test clients
(collectived_test_client: a seeded mix of all-reduce and all-gather, every
element checked) join a fresh key, in client or daemon mode by turns. In
about half the rounds one rank is SIGKILLed: before it joined, or after a
random delay while it runs ops and holds buffers; the next round starts it
again (a restart). Checked:
  - no wrong element in any client, killed rounds or not;
  - a round without a kill: every rank completes every op;
  - a killed round: every survivor ends within --learn-bound-s of the kill
    (op and join timeouts are 5 s), with ABORTED naming the killed rank
    (or, killed before it joined, the join's failure);
  - the daemon idle at the end holds the descriptors, memfds and threads of
    its own it held idle after a warm-up round per mode, unkilled, before the
    clock starts (a GPU daemon's driver opens its descriptors and threads at
    the first GPU communicator, once: not a leak) (gRPC's pool may keep up to
    --grpc-threads more), and its RSS grew by less than --rss-growth-mib.
  soak.py --daemon BIN --client BIN --minutes M --out DIR [--groups 2] [--world 4]
          [--daemon-args "--backend cuda" --client-args "--gpu 1"]   (the GPU soak, ranks under MPS)
Exits 0 when every check holds; DIR gets soak.csv, soak.txt and soak.png.
"""
import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time


def proc_stats(pid):
    fds = memfds = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}").startswith("/memfd:"):
                memfds += 1
        except OSError:
            pass
    threads = rss_kib = ours = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                ours += f.read().startswith("cd-")  # the daemon's own threads (gRPC's pool aside)
        except OSError:
            pass
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    return fds, memfds, threads, rss_kib, ours


class Soak:
    def __init__(self, a, workdir):
        self.a = a
        self.dir = workdir
        self.socket = os.path.join(workdir, "s.sock")
        self.lock = threading.Lock()
        self.failures = []
        self.rounds = self.killed_rounds = self.ops = 0
        self.kills = {"before-join": 0, "mid-op": 0}  # drawn
        self.landed = {"before-join": 0, "mid-op": 0}  # where the kill fell: before or after the victim joined
        self.learn_by = {"before-join": [], "mid-op": []}
        self.learn_s = []
        self.samples = []
        self.stop_at = 0.0

    def fail(self, what):
        with self.lock:
            self.failures.append(what)
        print("FAIL:", what, flush=True)

    def start_daemon(self):
        log = open(os.path.join(self.dir, "daemon.log"), "w")
        self.daemon = subprocess.Popen(
            [self.a.daemon, "--socket", self.socket, "--log-level", "warn", "--op-timeout-ms", "5000",
             "--join-timeout-ms", "5000", "--max-message-bytes", "1048576"] + self.a.daemon_args.split(),
            stdout=log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if os.path.exists(self.socket):
                return
            time.sleep(0.05)
        raise SystemExit("the daemon did not start: see " + log.name)

    def sample(self, t0):
        row = (time.monotonic() - t0,) + proc_stats(self.daemon.pid)
        with self.lock:
            self.samples.append(row)
        return row

    def record_hang(self, key, pids):
        """Where each thread of the hung processes and of the daemon sleeps
        (its state, kernel wait channel and syscall), then --hang-cmd's output:
        appended to OUT/hangs.txt."""
        lines = [f"## {key}: {len(pids)} hung, {time.strftime('%H:%M:%S')} (the daemon is pid {self.daemon.pid})"]
        for pid in pids + [self.daemon.pid]:
            try:
                for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
                    base = f"/proc/{pid}/task/{tid}"
                    with open(f"{base}/comm") as f:
                        comm = f.read().strip()
                    with open(f"{base}/wchan") as f:
                        wchan = f.read().strip()
                    with open(f"{base}/stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                    try:  # the blocking syscall's number (202 futex, 16 ioctl: the GPU driver), root only
                        with open(f"{base}/syscall") as f:
                            call = f.read().split()[0]
                    except OSError:
                        call = "?"
                    lines.append(f"pid {pid} tid {tid} {comm}: state {state}, wchan {wchan}, syscall {call}")
            except OSError as e:
                lines.append(f"pid {pid}: {e}")
        if self.a.hang_cmd:
            r = subprocess.run(self.a.hang_cmd, shell=True, capture_output=True, text=True, timeout=60)
            lines.append(r.stdout + r.stderr)
        with self.lock, open(os.path.join(self.a.out, "hangs.txt"), "a") as f:
            f.write("\n".join(lines) + "\n")

    def round(self, group, n, rng, warmup=False):
        world = self.a.world
        key = f"soak-{group}-{n}" if not warmup else f"warmup-{n}"
        modes = self.a.modes.split(",")
        mode = modes[n % len(modes)]
        seed = rng.randrange(1, 1 << 30)
        ops = rng.randrange(100, 400)
        kill = rng.random() < self.a.kill_fraction and not warmup
        kind = rng.choice(self.a.kills.split(",")) if kill else None
        victim = rng.randrange(world)
        procs, logs = [], []
        for r in range(world):
            path = os.path.join(self.dir, f"{key}-r{r}.log")
            logs.append(path)
            procs.append(subprocess.Popen(
                [self.a.client, "--socket", self.socket, "--key", key, "--world", str(world), "--rank", str(r),
                 "--mode", mode, "--ops", str(ops), "--seed", str(seed), "--max-count", "2048", "--window", "8"]
                + self.a.client_args.split(),
                stdout=open(path, "w"), stderr=subprocess.STDOUT))
        t_kill = None
        if kill:
            if kind == "before-join":
                time.sleep(rng.uniform(0, 0.03))
            else:
                # Mid-op: once the victim says it joined (a GPU client takes
                # longer than --mid-op-max-s to start: timed from the launch,
                # the 2026-12-06 GPU soak's "mid-op" kills all came before
                # the join), then a random delay into its ops.
                until = time.monotonic() + 30
                while time.monotonic() < until and procs[victim].poll() is None:
                    with open(logs[victim]) as f:
                        if f"rank {victim}: joined" in f.read():
                            break
                    time.sleep(0.005)
                # Log-uniform, 1/1000 of the bound to the bound: host ops end
                # in tens of ms, a GPU client's in seconds.
                time.sleep(self.a.mid_op_max_s * 10 ** rng.uniform(-3, 0))
            if procs[victim].poll() is None:
                procs[victim].send_signal(signal.SIGKILL)
                t_kill = time.monotonic()
        ended = {}
        deadline = time.monotonic() + self.a.round_timeout_s
        while len(ended) < world and time.monotonic() < deadline:
            for r, p in enumerate(procs):
                if r not in ended and p.poll() is not None:
                    ended[r] = time.monotonic()
            time.sleep(0.01)
        hung = [r for r in range(world) if r not in ended]
        if hung:
            self.record_hang(key, [procs[r].pid for r in hung])
        for r in hung:
            procs[r].kill()
            procs[r].wait()
            self.fail(f"{key}: rank {r} hung (no exit within {self.a.round_timeout_s:g} s)")
        outs = [open(path).read() for path in logs]
        for r, out in enumerate(outs):
            for m in re.finditer(r"(\d+) wrong", out):
                if int(m.group(1)) != 0:
                    self.fail(f"{key} ({mode}): rank {r}: {m.group(0)}: {out.strip()[:300]}")
        with self.lock:
            self.rounds += 1
        if t_kill is None:  # no kill, or the victim had already finished
            for r, out in enumerate(outs):
                if procs[r].returncode != 0 or f"{ops} ops, 0 wrong, 0 failed" not in out:
                    self.fail(f"{key} ({mode}, no kill): rank {r} rc {procs[r].returncode}: {out.strip()[:300]}")
            with self.lock:
                self.ops += ops * world
            return
        landed = "mid-op" if f"rank {victim}: joined" in outs[victim] else "before-join"
        with self.lock:
            self.killed_rounds += 1
            self.kills[kind] += 1
            self.landed[landed] += 1
        for r, out in enumerate(outs):
            if r == victim or r not in ended:
                continue  # a hung survivor has failed above
            learn = ended[r] - t_kill
            with self.lock:
                self.learn_s.append(learn)
                self.learn_by[landed].append(learn)
            if learn > self.a.learn_bound_s:
                self.fail(f"{key}: rank {r} took {learn:.2f} s to end after rank {victim} was killed")
            if procs[r].returncode == 0:
                continue  # it finished every op before the kill mattered
            named = f"rank {victim} left" in out
            joined_failed = re.search(r"create (GPU )?communicator", out) is not None
            if not named and not joined_failed:
                self.fail(f"{key} ({mode}, {kind}): rank {r} failed without naming rank {victim}: {out.strip()[:300]}")

    def group(self, g):
        rng = random.Random(self.a.seed * 1000 + g)
        n = 0
        while time.monotonic() < self.stop_at:
            self.round(g, n, rng)
            n += 1

    def run(self):
        self.start_daemon()
        time.sleep(0.5)
        # Warm-up: one unkilled round per mode, checked like the others; the
        # idle baseline is taken after it.
        warm_rng = random.Random(self.a.seed * 1000 - 1)
        for n in range(len(self.a.modes.split(","))):
            self.round(0, n, warm_rng, warmup=True)
        time.sleep(2)  # as at the end: the daemon reclaims the sessions
        t0 = time.monotonic()
        base = self.sample(t0)
        self.stop_at = t0 + self.a.minutes * 60
        groups = [threading.Thread(target=self.group, args=(g,)) for g in range(self.a.groups)]
        for t in groups:
            t.start()
        next_sample = t0 + self.a.sample_s
        while any(t.is_alive() for t in groups):
            if time.monotonic() >= next_sample:
                row = self.sample(t0)
                print(f"{row[0] / 60:5.1f} min: {row[1]} fds, {row[2]} memfds, {row[3]} threads ({row[5]} own), "
                      f"{row[4] / 1024:.1f} MiB; {self.rounds} rounds, {self.killed_rounds} killed, "
                      f"{len(self.failures)} failures", flush=True)
                next_sample += self.a.sample_s
            time.sleep(0.2)
        for t in groups:
            t.join()
        time.sleep(2)  # the daemon reclaims the last sessions
        end = self.sample(t0)
        self.daemon.send_signal(signal.SIGTERM)
        try:
            self.daemon.wait(20)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.fail("the daemon did not stop on SIGTERM within 20 s")
        if self.daemon.returncode not in (0, None):
            self.fail(f"the daemon exited with {self.daemon.returncode}")
        # Idle at the end as idle at the start.
        for i, what in ((1, "descriptors"), (2, "memfds"), (5, "daemon threads (cd-*)")):
            if end[i] != base[i]:
                self.fail(f"{what}: {base[i]} idle at the start, {end[i]} idle at the end")
        # gRPC sizes its own pool to the load and keeps it: bounded, not flat.
        if end[3] > base[3] + self.a.grpc_threads:
            self.fail(f"threads: {base[3]} idle at the start, {end[3]} idle at the end")
        # RSS: from the first sample under load (allocator pools warm) to the end.
        warm = self.samples[1] if len(self.samples) > 2 else base
        growth_mib = (end[4] - warm[4]) / 1024
        if growth_mib > self.a.rss_growth_mib:
            self.fail(f"RSS grew {growth_mib:.1f} MiB (from {warm[4] / 1024:.1f} to {end[4] / 1024:.1f})")
        return base, end, growth_mib


def plot(samples, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s[0] / 60 for s in samples]
    fig, ax = plt.subplots(4, 1, figsize=(7, 8), sharex=True)
    for i, (col, label) in enumerate(((1, "descriptors"), (2, "memfds"), (3, "threads"), (4, "RSS (MiB)"))):
        ax[i].plot(t, [s[col] / (1024 if col == 4 else 1) for s in samples], marker="o")
        ax[i].set_ylabel(label)
        ax[i].set_ylim(bottom=0)
    ax[-1].set_xlabel("minutes")
    fig.suptitle("collectived under the soak (sampled every interval, idle at both ends)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--daemon", required=True)
    p.add_argument("--client", required=True)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--out", required=True)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--sample-s", type=float, default=60)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--learn-bound-s", type=float, default=8.0)  # 5 s timeouts, plus slack for a loaded machine
    p.add_argument("--rss-growth-mib", type=float, default=32)
    p.add_argument("--grpc-threads", type=int, default=16)  # threads gRPC's pool may add and keep
    p.add_argument("--modes", default="client,daemon")  # taken by turns
    p.add_argument("--kill-fraction", type=float, default=0.5)
    p.add_argument("--mid-op-max-s", type=float, default=0.4)  # a mid-op kill: log-uniform up to this after the join
    p.add_argument("--kills", default="before-join,mid-op,mid-op")  # drawn from, per killed round
    p.add_argument("--daemon-args", default="")  # e.g. "--backend cuda" for the GPU soak
    p.add_argument("--client-args", default="")  # e.g. "--gpu 1": the test client's GPU communicators
    p.add_argument("--round-timeout-s", type=float, default=120)  # a rank not ended by then is hung
    p.add_argument("--hang-cmd", default="")  # run when a round hangs, its output to OUT/hangs.txt
    p.add_argument("--keep", action="store_true")  # keep the logs (daemon, every client) in OUT/logs
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.keep:
        workdir = os.path.join(a.out, "logs")
        os.makedirs(workdir, exist_ok=True)
        soak = Soak(a, workdir)
        base, end, growth = soak.run()
    else:
        with tempfile.TemporaryDirectory(prefix="collectived-soak-") as workdir:
            soak = Soak(a, workdir)
            base, end, growth = soak.run()
    with open(os.path.join(a.out, "soak.csv"), "w") as f:
        f.write("seconds,fds,memfds,threads,rss_kib,daemon_threads\n")
        for s in soak.samples:
            f.write("%.1f,%d,%d,%d,%d,%d\n" % s)
    learn = sorted(soak.learn_s)
    summary = [
        f"soak: {a.minutes} min, {a.groups} groups of {a.world} clients, seed {a.seed}",
        f"rounds {soak.rounds}, killed {soak.killed_rounds} (before join {soak.kills['before-join']}, "
        f"mid-op {soak.kills['mid-op']}; landed before the victim joined {soak.landed['before-join']}, "
        f"after {soak.landed['mid-op']}), ops checked in unkilled rounds {soak.ops}",
        "survivors ended after a kill: " + (f"median {learn[len(learn) // 2]:.2f} s, max {learn[-1]:.2f} s"
                                           if learn else "no survivors timed"),
    ] + [
        f"  killed {where}: median {sorted(v)[len(v) // 2]:.2f} s, max {max(v):.2f} s ({len(v)} survivors)"
        for where, v in (("before it joined", soak.learn_by["before-join"]), ("after it joined", soak.learn_by["mid-op"]))
        if v
    ] + [
        f"daemon idle at start: {base[1]} fds, {base[2]} memfds, {base[3]} threads ({base[5]} its own), "
        f"{base[4] / 1024:.1f} MiB; at end: {end[1]} fds, {end[2]} memfds, {end[3]} threads ({end[5]} its own), "
        f"{end[4] / 1024:.1f} MiB "
        f"(RSS {growth:+.1f} MiB since the first sample under load)",
        f"failures: {len(soak.failures)}",
    ] + soak.failures[:20]
    text = "\n".join(summary)
    print(text)
    with open(os.path.join(a.out, "soak.txt"), "w") as f:
        f.write(text + "\n")
    plot(soak.samples, os.path.join(a.out, "soak.png"))
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
