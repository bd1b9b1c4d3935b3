"""The hostile-peer cases (the trust boundaries of docs/SECURITY.md): each attack of
pdkv_hostile_peer (robustness/hostile) tried as a separate process against real victims
(hostile_cluster.Victims: `pdkv bootstrap`, a prefill and a decode rank on loopback).
A few need no attacker: what an unlucky cluster does to itself (a decode cancelling a
request mid-transfer) is tried on the same victims with the same checks.

Every case checks, besides what its attack must be refused with:
  - the victims are alive (bootstrap server, prefill, decode);
  - a legitimate room started after the attack succeeds with every byte verified (and,
    for the control-plane attacks, a room in flight during it too);
  - canaries are intact: no byte a room did not own changed on either rank, guard bands
    around the registered buffers included;
  - memory and descriptors are bounded: each victim's VmRSS and open descriptors grow by
    less than the case's bound across the attack;
  - logs are bounded: each rank's log (stderr, at warn) grows by less than the case's
    bound, however many messages the attacker sent.

Modes: "open" (no cluster secret: the checks pdkv makes without one) and "secret" (every
victim shares PDKV_SECRET_FILE; the attacker has none, or another one: every attack is
refused at the door: 401, no ZeroMQ handshake, a data connection closed before a frame).
A case with a `gap` is documented as NOT stopped without a secret (docs/SECURITY.md):
it runs in "open" mode only as an expected failure (the pytest suite marks it xfail).

python/tests/test_hostile_peers.py runs every case; `pdkv chaos --hostile` too."""
import dataclasses
import json
import os
import random
import re
import subprocess
import time
from typing import Callable, Optional

from hostile_cluster import SPARE_PAGES, Sampler, Victims, describe, snapshot, write_secret
from pdkv.testing.bootstrap import bin_dir

MIB = 1024


@dataclasses.dataclass
class Attack:
    name: str
    doc: str
    body: Callable
    gap: Optional[str] = None  # why "open" mode cannot stop it (docs/SECURITY.md)
    # Needs victims of its own in "open" mode (what gets through leaves state behind).
    # With a secret nothing gets through, so it shares victims there.
    fresh: bool = False
    modes: tuple = ("open", "secret")
    rss_mib: int = 32  # bound on each victim's RSS growth
    fd_slack: int = 48  # bound on each victim's descriptor growth
    legit_prefill_first: bool = False  # the legitimate room after opens its sender first
    log_kib: int = 64  # bound on each rank's log growth
    env: Optional[dict] = None  # victim settings of its own (fresh victims only)
    # The decode's own settings on top of env (fresh victims only); called when they start.
    decode_env: Optional[Callable[[], dict]] = None
    # Victims of its own in every mode: its settings are what it tests, with a secret too.
    always_fresh: bool = False


ATTACKS = {}


def attack(name, doc, **kw):
    def register(body):
        ATTACKS[name] = Attack(name, doc, body, **kw)
        return body
    return register


@dataclasses.dataclass
class Outcome:
    attack: str
    mode: str
    checks: dict = dataclasses.field(default_factory=dict)  # name -> (ok, detail)
    observed: list = dataclasses.field(default_factory=list)  # the attacker's JSON lines
    notes: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    bytes_verified: int = 0

    @property
    def ok(self):
        return all(ok for ok, _ in self.checks.values())

    def failed(self):
        return {k: d for k, (ok, d) in self.checks.items() if not ok}

    def summary(self):
        bad = self.failed()
        return ("ok" if not bad else "FAILED: " + "; ".join(f"{k}: {d}" for k, d in bad.items())) \
            + (" | " + "; ".join(self.notes) if self.notes else "")


class Run:
    """What an attack's body works with: the victims, the attacker, the checks."""

    def __init__(self, c: Victims, mode: str, wrong_secret: Optional[str], outcome: Outcome):
        self.c, self.mode, self.wrong_secret, self.out = c, mode, wrong_secret, outcome

    @property
    def secret(self):
        return self.mode == "secret"

    def expect(self, name, ok, detail=""):
        self.out.checks[name] = (bool(ok), str(detail)[:400])

    def peer(self, *args, wrong_secret=False, timeout=90):
        """Runs pdkv_hostile_peer once; its JSON line (or {"error": ...})."""
        return self.peer_result(self.start_peer(*args, wrong_secret=wrong_secret), timeout)

    def start_peer(self, *args, wrong_secret=False):
        """Starts pdkv_hostile_peer and returns at once (the victims are watched meanwhile);
        peer_result() waits for what it saw."""
        cmd = [os.path.join(bin_dir(), "pdkv_hostile_peer"), *map(str, args)]
        if wrong_secret:
            cmd += ["--secret-file", self.wrong_secret]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def peer_result(self, p, timeout=90):
        """The JSON line of a started pdkv_hostile_peer (or {"error": ...}), once it ended."""
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            seen = {"error": f"attacker hung: {' '.join(p.args[1:3])}"}
        else:
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            seen = json.loads(lines[-1]) if lines else {
                "error": f"attacker exit {p.returncode}: {err.strip()[-400:]}"}
        self.out.observed.append(seen)
        self.expect(f"attacker ran ({seen.get('attack', p.args[1])})", "error" not in seen,
                    seen.get("error", ""))
        return seen

    def refused_at_door(self, seen, what):
        """Secret mode, control plane: the victim refused the attacker's ZeroMQ handshake."""
        if self.secret:
            self.expect(f"{what}: ZeroMQ handshake refused (no secret)",
                        seen.get("handshake_refused") and seen.get("answers", 0) == 0, seen)

    def during(self, attack_fn, n=1, settle=0.3):
        """Opens n rooms (bootstrapped on both sides, not sent yet), runs attack_fn(rooms),
        checks no room ended meanwhile, then sends them: every byte must arrive."""
        c = self.c
        rooms = c.open_rooms(n, send=False)
        if not c.wait_bootstrapped(rooms):
            self.expect("room bootstrapped before the attack", False, describe(c, rooms))
            return rooms
        attack_fn(list(rooms))
        time.sleep(settle)
        early = {r: rk.states()[r]["state"] for r in rooms for rk in (c.p, c.d)
                 if rk.states().get(r, {}).get("state") in (0, 4)}
        self.expect("room in flight untouched by the attack", not early,
                    f"ended early: {early} {describe(c, rooms)}")
        c.send_pending()
        ok, nbytes, wrong, why = c.finish(rooms)
        self.out.bytes_verified += nbytes
        self.expect("room during the attack succeeded, bytes verified", ok and not wrong, why)
        return rooms

    def spare_page(self, rk, buffer=0):
        """Address of a registered page no room of `rk` ever uses (it holds a canary)."""
        base, nbytes, page = rk.ready["bufs"][buffer]
        return base + (rk.ready["capacity"] + SPARE_PAGES // 2) * page, page


# Victims of an attack that gets through without a secret: its rooms fail by timeout
# sooner, so the expected failure costs seconds, not tens.
GAP_ENV = {"PDKV_BOOTSTRAP_TIMEOUT_S": "3", "PDKV_WAITING_TIMEOUT_S": "3"}


def new_victims(topo, mode, tmpdir, name=None):
    """Victims for `mode`; with `name`, the settings that attack asks for."""
    secret = write_secret(os.path.join(tmpdir, "cluster_secret")) if mode == "secret" else None
    env, decode_env = {}, {}
    if name:
        a = ATTACKS[name]
        env = dict(GAP_ENV if a.gap else {}, **(a.env or {}))
        decode_env = a.decode_env() if a.decode_env else {}
    return Victims(topo, secret_file=secret, env=env, decode_env=decode_env)


def run_attack(c: Victims, name: str, mode: str, tmpdir: str) -> Outcome:
    """Tries one attack on running victims and checks everything the module doc lists."""
    a = ATTACKS[name]
    out = Outcome(name, mode)
    wrong = write_secret(os.path.join(tmpdir, "attacker_secret"), b"w" * 32)
    run = Run(c, mode, wrong, out)
    t0 = time.monotonic()
    before = snapshot(c)
    logged = {"prefill": c.p.err_bytes, "decode": c.d.err_bytes}
    with Sampler(c) as sampler:
        a.body(run)
    time.sleep(0.2)
    after = snapshot(c)
    alive = c.alive()
    run.expect("victims alive", all(alive.values()), alive)
    for proc, m in before.items():
        if not alive.get(proc) or after[proc]["pid"] != m["pid"]:
            continue  # dead (checked above) or replaced by the attack's body on purpose
        rss = (after[proc]["rss_kib"] or 0) - (m["rss_kib"] or 0)
        run.expect(f"{proc} RSS growth < {a.rss_mib} MiB", rss < a.rss_mib * MIB,
                   f"{rss / MIB:.1f} MiB ({m['rss_kib']} -> {after[proc]['rss_kib']} KiB)")
        fd = (after[proc]["fds"] or 0) - (m["fds"] or 0)
        peak = sampler.peak.get(proc, {})
        run.expect(f"{proc} descriptors growth < {a.fd_slack}", fd < a.fd_slack,
                   f"{m['fds']} -> {after[proc]['fds']} (peak {peak.get('fds')})")
        out.notes.append(f"{proc} rss {rss / MIB:+.1f} MiB fds {fd:+d} threads peak "
                         f"{peak.get('threads')}")
    for proc, rk in (("prefill", c.p), ("decode", c.d)):
        if proc in logged and rk.pid == before[proc]["pid"]:
            grew = rk.err_bytes - logged[proc]
            run.expect(f"{proc} log growth < {a.log_kib} KiB", grew < a.log_kib * 1024,
                       f"{grew} bytes, ending: {''.join(rk.err[-3:])[-300:]}")
            out.notes.append(f"{proc} log {grew:+d} bytes")
    if all(alive.values()):
        rooms = c.open_rooms(1, prefill_first=a.legit_prefill_first)
        ok, nbytes, wrong_rooms, why = c.finish(rooms)
        out.bytes_verified += nbytes
        run.expect("room after the attack succeeded, bytes verified", ok and not wrong_rooms, why)
        bad = c.check_canaries()
        run.expect("canaries and guard bands intact", not any(bad.values()), bad)
    out.seconds = time.monotonic() - t0
    return out


# --- 1. route poisoning ------------------------------------------------------------------

@attack("route_poison", "PUT/DELETE /route without the secret; re-pointing engine_rank 0, "
        "rank_ip values that are no address ('*', 'host:port', an address then a NUL byte)")
def _route_poison(r: Run):
    if r.secret:
        seen = r.peer("route-poison", "--bootstrap", r.c.bootstrap_addr, "--first-port", 1)
        r.expect("every write refused with 401", all(
            v.startswith("Unauthenticated") for v in seen.get("attempts", {}).values()), seen)
    else:
        # Without a secret the server still refuses routes that are not an IP or host name,
        # judged by every byte: "127.0.0.1\0evil" is refused, not stored and served back.
        seen = r.peer("route-poison", "--bootstrap", r.c.bootstrap_addr, "--first-port", 1,
                      "--malformed-only")
        r.expect("malformed routes refused with 400", all(
            v.startswith("InvalidArgument") for v in seen.get("attempts", {}).values()), seen)
    r.expect("route unchanged", seen.get("refused") and seen.get("route_unchanged"), seen)
    r.c.replace_decode()  # the next room's decode resolves the route anew


@attack("route_poison_unsigned", "an unsigned PUT re-pointing engine_rank 0, DELETE",
        gap="without a secret anyone can re-point or delete a route (docs/SECURITY.md)",
        fresh=True)
def _route_poison_unsigned(r: Run):
    seen = r.peer("route-poison", "--bootstrap", r.c.bootstrap_addr, "--first-port", 1)
    r.expect("route writes refused, route unchanged", seen.get("refused"), seen)
    r.c.replace_decode()


# --- 2. a stranger registering as a decode to be pushed the whole pool ---------------------

def prefill_only_room(r: Run):
    """A room the prefill is ready to send (pages filled, send() called) that no decode
    pre-allocated yet: what a stranger who learned its id would ask for."""
    room = r.c.next_room
    r.c.next_room += 1
    r.c.p.send(op="rooms", rooms=[room], pages=r.c.pages, send=True)
    r.c.p.wait(lambda ev: ev.get("ev") == "created", 10)
    return room


@attack("whole_pool",
        "register as a decode, pre-allocate with src stride 0 and the pool as one page")
def _whole_pool(r: Run):
    room = prefill_only_room(r)
    seen = r.peer("whole-pool", "--control", r.c.p.ready["ctrl"], "--room", room,
                  "--pages", r.c.p.ready["pages"], "--hold-ms", 1500)
    r.expect("no KV byte reached the stranger", seen.get("bytes_received") == 0, seen)
    if r.secret:
        r.refused_at_door(seen, "whole_pool")
    else:
        reasons = " ".join(s["reason"] for s in seen.get("statuses", []))
        r.expect("pre-allocation refused: fragments outside one page",
                 "does not stay inside one page" in reasons, seen)


@attack("room_pull", "register as a decode, pre-allocate another request's room the normal way",
        gap="without a secret a stranger that knows a room id can register and be pushed "
            "that room's KV (only the secret keeps strangers off the control plane)",
        fresh=True)
def _room_pull(r: Run):
    room = prefill_only_room(r)
    seen = r.peer("whole-pool", "--honest", "--control", r.c.p.ready["ctrl"], "--room", room,
                  "--count", r.c.pages, "--pages", r.c.p.ready["pages"], "--hold-ms", 1500)
    r.expect("no KV byte reached the stranger", seen.get("bytes_received") == 0, seen)
    r.refused_at_door(seen, "room_pull")


# --- 3. writes into a rank's engine --------------------------------------------------------

def _engine_refused(r: Run, seen, what):
    if r.secret:
        r.expect(f"{what}: connection closed at the handshake",
                 seen.get("refused") and seen.get("stage") == "session", seen)
    else:
        r.expect(f"{what}: refused (OutOfRange)", seen.get("refused")
                 and "OutOfRange" in seen.get("status", ""), seen)


@attack("raw_write_no_grant", "a write into a decode's registered page, naming no grant")
def _raw_write_no_grant(r: Run):
    dst, page = r.spare_page(r.c.d)
    seen = r.peer("raw-write", "--engine", r.c.d.ready["eng"], "--dst", dst, "--length", page)
    _engine_refused(r, seen, "write without a grant")


@attack("raw_write_unknown_grant", "a write into a decode's page naming a grant it never gave")
def _raw_write_unknown_grant(r: Run):
    dst, page = r.spare_page(r.c.d)
    grant = random.getrandbits(63) | 1
    # A grant that was live once: the decode's rooms end and revoke theirs.
    seen = r.peer("raw-write", "--engine", r.c.d.ready["eng"], "--dst", dst, "--length", page,
                  "--grant", grant)
    _engine_refused(r, seen, "write under an unknown grant")


@attack("raw_write_prefill", "writes into a prefill's KV pool (read-only to peers)")
def _raw_write_prefill(r: Run):
    base, _, page = r.c.p.ready["bufs"][0]
    for what, dst in (("spare page", r.spare_page(r.c.p)[0]), ("page 0", base)):
        seen = r.peer("raw-write", "--engine", r.c.p.ready["eng"], "--dst", dst, "--length", page)
        _engine_refused(r, seen, f"write into the prefill ({what})")


@attack("probe", "hand-made writes around a decode's buffers: refusals reveal no layout")
def _probe(r: Run):
    base, nbytes, _ = r.c.d.ready["bufs"][0]
    for what, dst, length in (("across the buffer's start", base - 64, 128),
                              ("across the registered end", base + nbytes - 64, 128),
                              ("far outside", 1 << 16, 4096)):
        seen = r.peer("probe", "--engine", r.c.d.ready["eng"], "--dst", dst, "--length", length)
        if r.secret:
            r.expect(f"probe {what}: closed before any frame", seen.get("closed_before_ack"), seen)
        else:
            r.expect(f"probe {what}: refused, nothing written",
                     seen.get("refused") and seen.get("bytes_written") == 0, seen)
            r.expect(f"probe {what}: the refusal names no address outside the write",
                     seen.get("bad_addr_inside_write") and not seen.get("leaks"), seen)


# --- 4. one message breaks rooms -----------------------------------------------------------

@attack("forged_pong", "Pongs claiming the decode's prefill restarted")
def _forged_pong(r: Run):
    def hit(rooms):
        seen = r.peer("forged-pong", "--control", r.c.d.ready["ctrl"], "--as",
                      r.c.p.ready["ctrl"], "--count", 64)
        r.refused_at_door(seen, "forged_pong")
    r.during(hit)


@attack("forged_abort_stranger", "Aborts of a room in flight from a rank that never served it")
def _forged_abort_stranger(r: Run):
    def hit(rooms):
        room = rooms[0]
        for target, as_ in ((r.c.d, None), (r.c.p, "tcp://127.0.0.1:9")):
            seen = r.peer("forged-abort", "--control", target.ready["ctrl"], "--room", room,
                          *(["--as", as_] if as_ else []))
            r.refused_at_door(seen, "forged_abort")
    r.during(hit)


def _forged_abort_as(name: str, doc: str, to: str, as_: str, **kw) -> None:
    """Registers an attack: to rank `to` ("p" or "d"), an Abort of a room in flight naming
    the control endpoint of the room's real peer `as_` (an endpoint proves no sender)."""
    def body(r: Run):
        def hit(rooms):
            seen = r.peer("forged-abort", "--control", getattr(r.c, to).ready["ctrl"],
                          "--room", rooms[0], "--as", getattr(r.c, as_).ready["ctrl"])
            r.refused_at_door(seen, name)
        r.during(hit)
    attack(name, doc, **kw)(body)


_forged_abort_as("forged_abort_as_decode",
                 "to the prefill: an Abort naming the room's real decode endpoint", "p", "d")
_forged_abort_as("forged_abort_as_prefill",
                 "to the decode: an Abort naming its prefill's (public) endpoint", "d", "p",
                 fresh=True)


def _forged_status(state):
    def body(r: Run):
        def hit(rooms):
            seen = r.peer("forged-status", "--control", r.c.d.ready["ctrl"], "--room", rooms[0],
                          "--state", state)
            r.refused_at_door(seen, f"forged_status_{state}")
        r.during(hit)
    return body


# Without the room's ticket (sent only in its pre-allocations) a status is dropped.
attack("forged_status_failed", "a TransferStatus{Failed} for a room in flight, to its decode",
       fresh=True)(_forged_status("failed"))
attack("forged_status_success", "a TransferStatus{Success} for a room in flight, to its decode",
       fresh=True)(_forged_status("success"))


# PDKV_VERIFY_CHECKSUM: a Success status names the regions the decode re-reads. One from a
# stranger (no ticket) naming 2 M ranges, each a whole KV buffer (~4 TiB to re-read), must
# be dropped before any re-read: the decode's receive thread keeps answering Pongs, so the
# in-flight room, held past the liveness timeout (4 heartbeats of 0.2 s), still succeeds.
@attack("forged_status_checksum_ranges",
        "a TransferStatus{Success} naming 2 M checksum ranges, to a PDKV_VERIFY_CHECKSUM decode",
        fresh=True, modes=("open",), rss_mib=96,
        env={"PDKV_VERIFY_CHECKSUM": "1", "PDKV_HEARTBEAT_INTERVAL_S": "0.2",
             "PDKV_HEARTBEAT_MAX_FAILURES": "4"})
def _forged_status_checksum_ranges(r: Run):
    base, nbytes, _ = r.c.d.ready["bufs"][0]

    def hit(rooms):
        seen = r.peer("forged-status", "--control", r.c.d.ready["ctrl"], "--room", rooms[0],
                      "--state", "success", "--ranges", 2000000, "--range-addr", base,
                      "--range-length", nbytes)
        r.expect("the forged status was queued", seen.get("sent") == 1, seen)
    r.during(hit, settle=2.0)


@attack("hijack_registration", "to the prefill: a registration naming the decode's endpoint",
        fresh=True)
def _hijack_registration(r: Run):
    def hit(rooms):
        seen = r.peer("hijack-registration", "--control", r.c.p.ready["ctrl"], "--as",
                      r.c.d.ready["ctrl"], "--pages", r.c.p.ready["pages"])
        r.refused_at_door(seen, "hijack_registration")
    r.during(hit, settle=0.6)


def _ping_flood(count):
    def body(r: Run):
        def hit(rooms):
            for target in (r.c.d, r.c.p):
                seen = r.peer("ping-flood", "--control", target.ready["ctrl"], "--count", count)
                r.refused_at_door(seen, "ping_flood")
        r.during(hit, settle=0.5)
    return body


attack("pings_to_closed_ports", "50 Pings to each rank naming closed reply ports",
       fd_slack=16)(_ping_flood(50))
attack("ping_flood", "2,000 Pings to each rank with distinct reply addresses (socket exhaustion)",
       fd_slack=32)(_ping_flood(2000))


# --- 5. resources ------------------------------------------------------------------------

def _flood_each_rank(r: Run, peer_attack, count):
    """`count` messages of pdkv_hostile_peer's `peer_attack` to each rank while a room is
    in flight: all of them queued without a secret, the handshake refused with one."""
    def hit(rooms):
        for target in (r.c.p, r.c.d):
            seen = r.peer(peer_attack, "--control", target.ready["ctrl"], "--count", count)
            r.refused_at_door(seen, peer_attack)
            if not r.secret:
                r.expect(f"every message queued ({peer_attack})", seen.get("sent") == count,
                         seen)
    r.during(hit)


@attack("abort_flood", "100,000 Aborts of rooms nobody opened, to each rank", rss_mib=64)
def _abort_flood(r: Run):
    _flood_each_rank(r, "abort-flood", 100000)


def _flood_pre_allocations(r: Run, count):
    seen = r.peer("pre-allocation-flood", "--control", r.c.p.ready["ctrl"], "--count", count,
                  "--pages", r.c.p.ready["pages"], "--hold-ms", 1000)
    r.refused_at_door(seen, "pre_allocation_flood")
    if not r.secret:
        first = json.dumps(seen.get("first_refusals", []))
        r.expect("past PDKV_MAX_PENDING_ROOMS refused with the reason",
                 seen.get("refusals", 0) > 0 and "PDKV_MAX_PENDING_ROOMS" in first, seen)


# A held room costs the prefill ~2.3 KiB: one registered decode may make it hold 8192
# (PDKV_MAX_PENDING_ROOMS_PER_DECODE, ~19 MiB) until the bootstrap timeout, all decodes
# together 65536 (~150 MiB; docs/SECURITY.md). The bound is checked with a cap of 16384.
@attack("pre_allocation_flood", "register, then pre-allocate 100,000 rooms nobody opened "
        "(PDKV_MAX_PENDING_ROOMS 16384)", rss_mib=64, fresh=True, legit_prefill_first=True,
        env={"PDKV_MAX_PENDING_ROOMS": "16384"})
def _pre_allocation_flood(r: Run):
    _flood_pre_allocations(r, 100000)


# One registered decode may hold at most PDKV_MAX_PENDING_ROOMS_PER_DECODE of the shared
# budget (half of it here), so a stranger registered as one cannot lock the others out.
@attack("pending_room_lockout", "try to fill PDKV_MAX_PENDING_ROOMS (4096; 2048 per decode), "
        "then a room whose decode pre-allocates before the prefill's sender opens",
        fresh=True, env={"PDKV_MAX_PENDING_ROOMS": "4096",
                         "PDKV_MAX_PENDING_ROOMS_PER_DECODE": "2048"})
def _pending_room_lockout(r: Run):
    _flood_pre_allocations(r, 5000)
    rooms = r.c.open_rooms(1, decode_lead_s=1.0)
    ok, nbytes, wrong, why = r.c.finish(rooms)
    r.out.bytes_verified += nbytes
    r.expect("an early pre-allocation of a real decode still served", ok and not wrong, why)


# A registration is answered on a one-off socket until its decode proves it receives at
# its endpoint (its first pre-allocation echoes the answer's challenge), and no data
# session is opened for it before: made-up endpoints cost the prefill a record each.
@attack("registration_flood", "1,000 registrations from made-up decode endpoints",
        fresh=True, rss_mib=64)
def _registration_flood(r: Run):
    seen = r.peer("registration-flood", "--control", r.c.p.ready["ctrl"], "--count", 1000,
                  "--first-port", 20000, "--pages", r.c.p.ready["pages"])
    r.refused_at_door(seen, "registration_flood")
    time.sleep(1.0)


# Every log line a peer's messages trigger is rate-limited per call site (10 a second),
# the next line let through counting those dropped: 100,000 garbage messages to each rank
# and a stranger's 20,000 pre-allocations (which fail when it leaves) write a few KiB of
# log, not megabytes. With a secret the garbage never passes the ZeroMQ handshake.
@attack("garbage_flood", "100,000 messages that are no pdkv message to each rank, then a "
        "registered stranger's 20,000 pre-allocations of rooms nobody opened", fresh=True,
        rss_mib=64, log_kib=128)
def _garbage_flood(r: Run):
    _flood_each_rank(r, "garbage-flood", 100000)
    if r.secret:
        return
    _flood_pre_allocations(r, 20000)
    time.sleep(3)  # the stranger left: the prefill fails its rooms once it sees it gone
    # One more garbage message each, in a later second: its line counts those dropped.
    for target in (r.c.p, r.c.d):
        r.peer("garbage-flood", "--control", target.ready["ctrl"], "--count", 1)
    time.sleep(0.5)
    for name, rk in (("prefill", r.c.p), ("decode", r.c.d)):
        text = "".join(rk.err)
        r.expect(f"{name}: the garbage's log lines were dropped and counted", re.search(
            r"\((\d{5}) similar lines suppressed\)\n[^\n]*dropped a malformed", text),
            text[-600:])
    r.expect("prefill: the pre-allocations past the per-decode cap were logged",
             "PDKV_MAX_PENDING_ROOMS_PER_DECODE" in "".join(r.c.p.err), "".join(r.c.p.err)[-600:])


@attack("idle_connections", "400 data connections to the decode's engine that never speak",
        fd_slack=32)
def _idle_connections(r: Run):
    before = snapshot(r.c)["decode"]["threads"]
    with Sampler(r.c) as s:
        seen = r.peer("idle-connections", "--engine", r.c.d.ready["eng"], "--count", 400,
                      "--hold-ms", 6000)
    cap = 128
    r.expect("past the connection cap closed at accept",
             seen.get("closed_at_once", 0) >= 400 - cap - 8, seen)
    r.expect("every idle connection closed by the first-byte timeout or the cap",
             seen.get("still_open") == 0, seen)
    peak = s.peak.get("decode", {}).get("threads", 0)
    r.expect(f"decode threads bounded by the cap ({cap})", peak - before <= cap + 8,
             f"{before} -> peak {peak}")


def _hold_slots_during_a_new_session(r: Run, source):
    """A stranger keeps every connection slot of a fresh decode's engine (PDKV_TCP_MAX_
    CONNECTIONS 128) taken with silent connections from `source`, reopening each one the
    decode closes, while a prefill opens its first session to it: (succeeded, reason)."""
    r.c.replace_decode()
    p = r.start_peer("hold-slots", "--engine", r.c.d.ready["eng"], "--source", source,
                     "--count", 200, "--hold-ms", 3000)
    try:
        time.sleep(0.5)  # the stranger takes what it can first
        t0 = time.monotonic()
        rooms = r.c.open_rooms(1)
        ok, nbytes, wrong, why = r.c.finish(rooms, timeout=10)
        r.out.bytes_verified += nbytes
        r.out.notes.append(f"room ended in {time.monotonic() - t0:.2f} s")
        room = next(iter(rooms))
        reason = " ".join(rk.states().get(room, {}).get("reason", "") for rk in (r.c.p, r.c.d))
    finally:
        seen = r.peer_result(p, timeout=30)
    r.expect("the stranger had as many connections open as the engine has slots",
             seen.get("held_most", 0) >= 128, seen)
    return ok and not wrong, reason or why


# Connections that have not finished their handshake may hold at most 3/4 of the slots
# and one address 1/8: a stranger on another address (127.0.0.2) cannot keep a prefill's
# new session out.
@attack("slot_hoarding", "a stranger on another address holding every engine connection slot "
        "while a prefill opens a new session", fresh=True, fd_slack=160)
def _slot_hoarding(r: Run):
    ok, why = _hold_slots_during_a_new_session(r, "127.0.0.2")
    r.expect("a new session's room succeeded while the stranger held its slots", ok, why)


@attack("slot_hoarding_shm", "as slot_hoarding, on the shm backend's lease server",
        fresh=True, fd_slack=160, modes=("open",), env={"PDKV_ENGINE_BACKEND": "shm"})
def _slot_hoarding_shm(r: Run):
    ok, why = _hold_slots_during_a_new_session(r, "127.0.0.2")
    r.expect("a new session's room succeeded while the stranger held its slots", ok, why)


# On the prefill's own address the stranger's share is the prefill's too: the session
# may be refused, but then the room fails saying so, not blaming the cluster secret.
@attack("slot_hoarding_same_address", "a stranger on the prefill's address holding every "
        "engine connection slot while the prefill opens a new session", fresh=True,
        fd_slack=160, legit_prefill_first=True)
def _slot_hoarding_same_address(r: Run):
    ok, why = _hold_slots_during_a_new_session(r, "127.0.0.1")
    r.expect("the room succeeded, or failed naming the full connection slots",
             ok or ("no connection slot" in why and "secret" not in why), why)


@attack("huge_header", "32 connections each declaring a 2^20-entry table (40 MiB), then silent",
        rss_mib=16)
def _huge_header(r: Run):
    seen = r.peer("huge-header", "--engine", r.c.d.ready["eng"], "--count", 32,
                  "--entries", 1 << 20, "--hold-ms", 6000)
    r.expect("every stalled connection closed", seen.get("still_open") == 0
             and seen.get("sent") == 32, seen)


@attack("http_flood", "3,000 unauthenticated PUT /route from 4 clients; /health must answer",
        rss_mib=16)
def _http_flood(r: Run):
    seen = r.peer("http-flood", "--bootstrap", r.c.bootstrap_addr, "--count", 3000,
                  "--threads", 4)
    want = "401" if r.secret else "400"
    r.expect(f"every PUT refused ({want})", set(seen.get("answers", {})) == {want}, seen)
    r.expect("/health answered throughout", seen.get("health_failed") == 0
             and seen.get("health_ok", 0) > 0 and seen.get("health_max_ms", 1e9) < 1500, seen)


# --- a stranger with ANOTHER secret (secret mode only) -------------------------------------

@attack("wrong_secret", "an attacker with a secret of its own: engine, control plane, bootstrap",
        modes=("secret",))
def _wrong_secret(r: Run):
    dst, page = r.spare_page(r.c.d)
    seen = r.peer("raw-write", "--engine", r.c.d.ready["eng"], "--dst", dst, "--length", page,
                  wrong_secret=True)
    r.expect("engine: handshake failed, nothing written",
             seen.get("refused") and seen.get("stage") == "session", seen)
    seen = r.peer("route-poison", "--bootstrap", r.c.bootstrap_addr, "--first-port", 1,
                  wrong_secret=True)
    r.expect("bootstrap: every write refused with 401", seen.get("refused") and all(
        v.startswith("Unauthenticated") for v in seen.get("attempts", {}).values()), seen)
    r.c.replace_decode()

    def hit(rooms):
        s = r.peer("forged-status", "--control", r.c.d.ready["ctrl"], "--room", rooms[0],
                   "--state", "success", wrong_secret=True)
        r.refused_at_door(s, "control plane")
    r.during(hit)


def needs_fresh(name, mode):
    a = ATTACKS[name]
    return a.always_fresh or (a.fresh and mode == "open")


def cases(mode):
    """Attack names run in `mode`, the shared-victim ones first."""
    names = [n for n, a in ATTACKS.items() if mode in a.modes]
    return sorted(names, key=lambda n: needs_fresh(n, mode))


def case(topo, name, mode):
    """One attack in one mode as a `pdkv chaos` row, on victims of its own."""
    import tempfile

    from cases import row, skipped
    a = ATTACKS[name]
    fault = f"hostile {name} ({mode})"
    if a.gap and mode == "open":
        return skipped(fault, "1P1D", "not stopped without a secret (docs/SECURITY.md): " + a.gap)
    with tempfile.TemporaryDirectory() as tmp:
        c = new_victims(topo, mode, tmp, name)
        try:
            out = run_attack(c, name, mode, tmp)
        finally:
            c.crashes = c.close()
    return row(fault, "1P1D", bytes_verified=out.bytes_verified, ok=out.ok,
               note=out.summary()[:300])


import hostile_refusals  # noqa: E402,F401  (registers its cases into ATTACKS)
