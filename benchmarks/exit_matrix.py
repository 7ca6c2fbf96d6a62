"""Benchmark: how an app and a service end when they are stopped in the middle of driver work (issue 33).

For every driver, in-process and served (`nnapi serve`, started for the run), an app compiles a real model
with a cache folder and runs it; the harness sends Ctrl-C (SIGINT) while the app is in one phase:

- cold:      the cold preparation (compiling, writing the cache files);
- first:     the first execution;
- optimise:  the execution after which xla compiles its optimised executable in the background;
- timed:     the steady runs;

and, for the served mode, SIGTERM to the service once the app has done its work (`serve`). The app
prints a marker as it enters each phase; the signal follows the marker after a random delay within the
phase's usual length, so the tries spread over it.

A try passes when it exits with 0 or 130 (the service: 0), prints no native crash ("terminate called",
"Fatal Python error", "Segmentation fault", "Aborted"), and leaves the cache folder with complete files
only: every entry either empty (not written) or one its driver prepares from (`nnapi cache verify`).
Goal: every try passes.

usage: python benchmarks/exit_matrix.py [--tries N] [--devices reference,xla,openvino] [--modes in-process,served]
The last line printed is one JSON object with every count.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "examples", "models", "face_detection_short_range.tflite")
PHASES = ("cold", "first", "optimise", "timed")
CRASHES = ("terminate called", "Fatal Python error", "Segmentation fault", "Aborted", "core dumped")

APP = textwrap.dedent('''
    import sys
    def mark(phase):
        print(phase, flush=True)
    try:  # as a well-behaved app does: Ctrl-C ends it with 130
        import numpy as np, nnapi
        path, device, cache = sys.argv[1:4]
        mark("cold")
        model = nnapi.load(path, devices=[device], cache_dir=cache)
        feeds = [np.zeros(i.shape, i.dtype) for i in model.inputs]
        mark("first")
        model.run(feeds)
        mark("optimise")
        model.run(feeds)
        mark("timed")
        for _ in range(100000):
            model.run(feeds)
    except KeyboardInterrupt:
        sys.exit(130)
''')


def _wait_for(proc: subprocess.Popen, marker: str, timeout: float) -> bool:
    """Read the app's markers until `marker` (False: the app ended or took too long)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            return False
        line = proc.stdout.readline()
        if not line:
            return False
        if line.strip() == marker:
            return True
    return False


def _cache_complete(cache: str, env: dict, driver_env: dict) -> tuple[bool, str]:
    """Every entry of the app's cache folder is empty or verifies (`nnapi cache verify`): the import memos
    against the app's state directory (`env`), the drivers' entries against their own (`driver_env`: the
    service's when served)."""
    if not os.path.isdir(cache) or not os.listdir(cache):
        return True, "empty"
    checks = [(env, lambda e: True)] if driver_env is env else \
        [(env, lambda e: e.get("kind") == "import"), (driver_env, lambda e: e.get("kind") != "import")]
    bad = []
    for run_env, owned in checks:
        out = subprocess.run([sys.executable, "-m", "nnapi.cli", "cache", "verify", cache, "--json"],
                             capture_output=True, text=True, env=run_env, timeout=600)
        try:
            report = json.loads(out.stdout)
        except ValueError:
            return False, f"nnapi cache verify: rc {out.returncode}: {out.stderr.strip()[-300:]}"
        bad += [e for e in report if owned(e) and e.get("size") and not e.get("ok")]  # (size 0: not written)
    return not bad, "; ".join(str(e.get("reason")) for e in bad[:3]) or "ok"


def _start_service(device: str, folder: str, state: str, env: dict) -> subprocess.Popen:
    from nnapi.service import default_socket
    socket = default_socket(device, folder)
    proc = subprocess.Popen([sys.executable, "-m", "nnapi.cli", "serve", "--driver", device, "--socket", socket,
                             "--state-dir", state], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    end = time.monotonic() + 120
    while not os.path.exists(socket) and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    return proc


def _ended(proc: subprocess.Popen, timeout: float, after: str) -> str:
    """Wait for `proc` to end (killed after `timeout` seconds); its stderr."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1] + f"\n(hung after {after}: killed)"


def _crashed(proc: subprocess.Popen, err: str) -> bool:
    """A native crash: an abort or a segfault, by exit status or by what it printed."""
    return any(c in err for c in CRASHES) or proc.returncode in (-6, -11, 134, 139)


def one_try(device: str, mode: str, phase: str, work: str, rng: random.Random) -> dict:
    """One app stopped in `phase`; returns what happened."""
    cache = os.path.join(work, "cache")
    env = dict(os.environ, NNAPI_STATE_DIR=os.path.join(work, "state"), NNAPI_XLA_OPTIMIZE_AFTER="2")
    env.pop("NNAPI_SERVICE_DIR", None)
    service = None
    if mode == "served":
        folder = os.path.join(work, "services")
        os.makedirs(folder, mode=0o755, exist_ok=True)
        service = _start_service(device, folder, os.path.join(work, "service-state"), env)
        env["NNAPI_SERVICE_DIR"] = folder
    app = subprocess.Popen([sys.executable, "-c", APP, MODEL, device, cache], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    target = "timed" if phase == "serve" else phase
    reached = _wait_for(app, target, 300)
    if reached and phase != "serve":
        time.sleep(rng.uniform(0.0, {"cold": 0.8, "first": 0.2, "optimise": 0.5, "timed": 0.3}[phase]))
        app.send_signal(signal.SIGINT)
    elif reached:
        time.sleep(0.3)
        app.send_signal(signal.SIGINT)
    app_err = _ended(app, 120, "the signal")
    result = {"rc": app.returncode, "reached": reached, "crash": _crashed(app, app_err)}
    if service is not None:
        service.send_signal(signal.SIGTERM)
        service_err = _ended(service, 60, "SIGTERM")
        result["service_rc"] = service.returncode
        result["crash"] = result["crash"] or _crashed(service, service_err)
        if result["crash"] or service.returncode != 0:
            result["service_err"] = service_err.strip()[-500:]
    app_env = dict(env)
    app_env.pop("NNAPI_SERVICE_DIR", None)
    driver_env = app_env  # (the served driver's registry is in the service's state directory)
    if service is not None:
        driver_env = dict(app_env, NNAPI_STATE_DIR=os.path.join(work, "service-state"))
    complete, why = _cache_complete(cache, app_env, driver_env)
    result["cache_complete"], result["cache"] = complete, why
    ok_rc = app.returncode in (0, 130)
    result["ok"] = ok_rc and not result["crash"] and complete and result.get("service_rc", 0) == 0
    if not result["ok"]:
        result["err"] = app_err.strip()[-500:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=50)
    parser.add_argument("--devices", default="reference,xla,openvino")
    parser.add_argument("--modes", default="in-process,served")
    parser.add_argument("--phases", default=",".join(PHASES + ("serve",)))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {args.tries} tries per cell")
    print(f"{'device':<10} {'mode':<11} {'phase':<9} {'tries':>5} {'ok':>4} {'crash':>5} {'bad rc':>6} "
          f"{'bad cache':>9}  first failure")
    for device in args.devices.split(","):
        for mode in args.modes.split(","):
            for phase in args.phases.split(","):
                if phase == "serve" and mode != "served":
                    continue
                results = []
                for _ in range(args.tries):
                    work = tempfile.mkdtemp(prefix="nnapi-exit-")
                    try:
                        results.append(one_try(device, mode, phase, work, rng))
                    finally:
                        shutil.rmtree(work, ignore_errors=True)
                failed = [r for r in results if not r["ok"]]
                row = {"device": device, "mode": mode, "phase": phase, "tries": len(results),
                       "ok": len(results) - len(failed), "crashes": sum(r["crash"] for r in results),
                       "bad_rc": sum(r["rc"] not in (0, 130) or r.get("service_rc", 0) != 0
                                     for r in results),
                       "bad_cache": sum(not r["cache_complete"] for r in results),
                       "rcs": sorted({r["rc"] for r in results}),
                       "unreached": sum(not r["reached"] for r in results)}
                first = failed[0] if failed else None
                if first:
                    row["first_failure"] = {k: first[k] for k in ("rc", "err", "cache", "service_rc", "service_err")
                                            if k in first}
                rows.append(row)
                note = "" if first is None else f"rc {first['rc']}: {(first.get('err') or first.get('cache'))[-80:]!r}"
                print(f"{device:<10} {mode:<11} {phase:<9} {row['tries']:>5} {row['ok']:>4} {row['crashes']:>5} "
                      f"{row['bad_rc']:>6} {row['bad_cache']:>9}  {note}", flush=True)
    print(json.dumps({"tries": args.tries, "cells": rows, "all_ok": all(r["ok"] == r["tries"] for r in rows)}))


if __name__ == "__main__":
    main()
