"""`nnapi fleet keygen KEYFILE` and `nnapi fleet ls|verify|prune`: the fleet tier's keys and store.

    nnapi fleet keygen KEYFILE        the private key to KEYFILE (0600), the public key line to KEYFILE.pub
    nnapi fleet ls [--fleet URL]      every entry: driver, version, token, signer, size, age
    nnapi fleet verify [--fleet URL]  the same, each entry checked (signature, trust list, blobs); rc 1 if any fails
    nnapi fleet prune [--fleet URL] [--max-age-days D] [--dry-run]   drop bad or old entries, unused blobs

The store is `--fleet` or `NNAPI_FLEET`; the trust list `NNAPI_FLEET_TRUST` (see `nnapi.caching.fleet`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `nnapi fleet`."""
    p.add_argument("action", choices=("keygen", "ls", "verify", "prune"))
    p.add_argument("keyfile", nargs="?", help="keygen: where to write the private key (KEYFILE.pub: the public key)")
    p.add_argument("--fleet", metavar="URL", help="the store (default: NNAPI_FLEET), e.g. redis://HOST:PORT/DB")
    p.add_argument("--max-age-days", type=float, help="prune: also drop entries older than this")
    p.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON")


def _fail(message: str) -> int:
    print(f"nnapi fleet: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Write a key pair, or list, verify or prune the store's entries."""
    from ..caching.fleet import ENV_TRUST, ENV_URL, Fleet, keygen, load_trust
    from ..caching.fleet_store import StoreError, open_store
    if args.action == "keygen":
        if not args.keyfile:
            return _fail("keygen needs KEYFILE")
        if os.path.exists(args.keyfile):
            return _fail(f"{args.keyfile} exists: not overwritten")
        try:
            line = keygen(args.keyfile)
        except OSError as e:
            return _fail(f"cannot write {args.keyfile}: {e.strerror or e}")
        print(f"private key: {args.keyfile} (mode 600)\npublic key:  {args.keyfile}.pub\n{line}")
        return 0
    url = args.fleet or os.environ.get(ENV_URL)
    if not url:
        return _fail(f"no store: give --fleet URL or set {ENV_URL}")
    try:
        trust = load_trust(os.environ[ENV_TRUST]) if os.environ.get(ENV_TRUST) else {}
        fleet = Fleet(open_store(url, timeout=5.0), trust)
        if args.action == "prune":
            report = fleet.prune(None if args.max_age_days is None else args.max_age_days * 86400, args.dry_run)
            print(json.dumps(report) if args.json else
                  f"{'would drop' if args.dry_run else 'dropped'} {report['entries_dropped']} entries and "
                  f"{report['blobs_dropped']} blobs and {report['claims_dropped']} claims; {report['entries_kept']} "
                  "entries kept")
            return 0
        rows = fleet.entries()
    except (OSError, ValueError, StoreError) as e:
        return _fail(str(e))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"fleet {url}")
        for row in rows:
            age = f"{(time.time() - row['created']) / 3600:.1f} h" if "created" in row else "-"
            line = (f"  {row.get('driver', '?')}  {row.get('version', '?')}  token {row.get('token', '?')[:16]}  "
                    f"signed by {row.get('signer', '-')}  {row.get('bytes', '-')} bytes  {age}")
            if args.action == "verify":
                line += "  ok" if row["ok"] else f"  refused: {row['reason']}"
            print(line)
        print(f"{len(rows)} entries" + (f", {sum(not r['ok'] for r in rows)} refused" if args.action == "verify"
                                         else ""))
    return 1 if args.action == "verify" and any(not r["ok"] for r in rows) else 0
