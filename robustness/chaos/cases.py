"""The chaos cases. Each returns a row: fault, config, rooms affected, detection time vs
bound, bytes verified, leaks, crashes/hangs, ok, note."""
import dataclasses
import os
import random
import socket
import time
from typing import Optional

from pdkv.testing import liveness_bound_s

from cluster import FAILED, RANK_ENV, SUCCESS, Cluster, wait_past_bootstrap

R1_BOUND = 2.0
R2_BOUND = liveness_bound_s(RANK_ENV)  # 0.5 s x 3 + 1 s at pdkv's defaults


def cfg_name(n_p, n_d, p_tp, d_tp):
    s = f"{n_p}P{n_d}D"
    return s if p_tp == d_tp == 1 else f"{s} TP{p_tp}->TP{d_tp}"


def row(fault, config, **kw):
    r = dict(fault=fault, config=config, rooms_affected=0, detect_s=None, bound_s=None,
             bytes_verified=0, wrong_bytes=0, leaks=0, crashes=0, ok=False, note="")
    r.update(kw)
    return r


def fail_time(rk, room):
    ev = rk.states().get(room)
    return ev["t"] if ev and ev["state"] == FAILED else None


def heal_check(c, n=2, timeout=20, out=None):
    """New rooms over every pair succeed with verified bytes; `out`, if given, receives
    the rooms (so a failure can name their reasons)."""
    rooms = c.submit(max(n, c.n_p * c.n_d))
    if out is not None:
        out.update(rooms)
    c.wait_rooms(c.ranks_of(rooms), rooms, timeout)
    ok, nbytes, wrong = c.verdict(rooms)
    return ok, nbytes, wrong


@dataclasses.dataclass
class KillOutcome:
    """What kill_with_rooms_in_flight saw: the victim's rooms, the slowest time from the
    kill to a Failed on the other side (inf where one never failed, None without rooms),
    the other rooms and their verdict, and whether every rank of the other side lives."""
    victim: dict
    detect_s: Optional[float]
    others: dict
    others_ok: bool
    bytes_verified: int
    wrong_bytes: int
    peers_alive: bool


def kill_with_rooms_in_flight(c, role, bound) -> KillOutcome:
    """Kills (-9) instance 0 of `role` once the rooms it shares with the other side are
    pre-allocated there and before their chunks are sent, then waits for the other side to
    fail them (up to `bound` + 8 s) and for the rooms of the other instances to end."""
    side = ("prefill", "decode").index(role)
    peer_role = ("decode", "prefill")[side]
    peers = getattr(c, peer_role)
    rooms = c.submit(4 * c.n_p * c.n_d, send=False)
    victim = {r: pd for r, pd in rooms.items() if pd[side] == 0}
    others = {r: pd for r, pd in rooms.items() if pd[side] != 0}
    # the pre-allocations have reached the victim's peers (rooms WaitingForInput there)
    wait_past_bootstrap([(rk, r) for r, pd in victim.items() for rk in peers[pd[1 - side]]])
    t_kill = time.monotonic()
    for rk in getattr(c, role)[0]:
        rk.kill()
    c.send_pending()
    c.wait_rooms(c.ranks_of(victim, (peer_role,)), victim, bound + 8)
    detect = []
    for r, pd in victim.items():
        for rk in peers[pd[1 - side]]:
            t = fail_time(rk, r)
            detect.append(t - t_kill if t else float("inf"))
    c.wait_rooms(c.ranks_of(others), others, 20)
    ok, nbytes, wrong = c.verdict(others) if others else (True, 0, 0)
    return KillOutcome(victim, max(detect) if detect else None, others, ok, nbytes, wrong,
                       all(rk.alive() for inst in peers for rk in inst))


def case_kill_decode(topo, n_p=1, n_d=2, p_tp=1, d_tp=1):
    """R1: kill -9 of decode instance 0 while its rooms are in flight (pre-allocated on the
    prefill, chunks sent right after the kill); other decodes' rooms succeed; a decode
    restarted on the same host registers again and succeeds."""
    name = cfg_name(n_p, n_d, p_tp, d_tp)
    c = Cluster(topo, n_p, n_d, p_tp, d_tp)
    try:
        k = kill_with_rooms_in_flight(c, "decode", R1_BOUND)
        c.restart_decode(0)
        rooms2 = c.submit(2 * n_p, only_decode=0)
        c.wait_rooms(c.ranks_of(rooms2), rooms2, 20)
        ok_r, nb2, w2 = c.verdict(rooms2)
        leaks = c.leaks()
        ok = (k.detect_s is not None and k.detect_s <= R1_BOUND and k.others_ok
              and k.peers_alive and ok_r and leaks == 0 and k.wrong_bytes + w2 == 0)
        note = []
        if not k.others_ok:
            note.append("unaffected rooms did not all succeed")
        if not ok_r:
            note.append("restarted decode failed: " + reasons(c, rooms2))
        if not k.peers_alive:
            note.append("prefill died")
        return row("R1 kill -9 decode", name, rooms_affected=len(k.victim), detect_s=k.detect_s,
                   bound_s=R1_BOUND, bytes_verified=k.bytes_verified + nb2,
                   wrong_bytes=k.wrong_bytes + w2, leaks=leaks, ok=ok, note="; ".join(note))
    finally:
        c.crashes = c.close()


def reasons(c, rooms):
    out = []
    for rk in c.ranks():
        for r in rooms:
            ev = rk.states().get(r)
            if ev and ev.get("reason"):
                out.append(f"{rk.cfg['role']}{rk.cfg['rank']} room {r}: {ev['reason'][:300]}")
            elif not ev or ev["state"] not in (0, 4):
                out.append(f"{rk.cfg['role']}{rk.cfg['rank']} room {r}: "
                           f"{'unknown' if not ev else 'state ' + str(ev['state'])}")
    return " | ".join(out[:4]) or "no reason / not terminal"


def case_kill_prefill(topo, n_p=2, n_d=1, p_tp=1, d_tp=1):
    """R2: kill -9 of prefill instance 0 (its bootstrap server lives) with rooms in flight;
    the decode's rooms of that prefill fail within the heartbeat bound, the decode lives and
    rooms of the other prefill (if any) succeed."""
    name = cfg_name(n_p, n_d, p_tp, d_tp)
    c = Cluster(topo, n_p, n_d, p_tp, d_tp)
    try:
        k = kill_with_rooms_in_flight(c, "prefill", R2_BOUND)
        leaks = c.leaks()
        ok = k.detect_s is not None and k.detect_s <= R2_BOUND and k.others_ok \
            and k.peers_alive and leaks == 0 and k.wrong_bytes == 0
        return row("R2 kill -9 prefill", name, rooms_affected=len(k.victim), detect_s=k.detect_s,
                   bound_s=R2_BOUND, bytes_verified=k.bytes_verified, wrong_bytes=k.wrong_bytes,
                   leaks=leaks, ok=ok,
                   note="" if k.others_ok else "unaffected rooms failed: " + reasons(c, k.others))
    finally:
        c.crashes = c.close()


def skipped(fault, config, why):
    return row(fault, config, ok=True, skipped=True, note="SKIPPED: " + why)


def case_link_cut(topo, mode="down"):
    """R3: the decode host's link cut (ip link down or netem loss 100 %) with rooms in
    flight, then restored; rooms Failed on both sides within the heartbeat bound; new rooms
    succeed after the restore."""
    if mode != "down" and not topo.tc_supports("netem"):
        return skipped("R3 link cut (netem loss 100%)", "1P1D",
                       "tc netem is not in this kernel (sch_netem missing); ip link down covers R3")
    c = Cluster(topo, 1, 1)
    try:
        rooms = c.submit(4, send=False)
        wait_past_bootstrap([(c.prefill[0][0], r) for r in rooms])
        host = c.host_of("decode", 0)
        t_cut = time.monotonic()
        if mode == "down":
            topo.link_down(host)
        else:
            topo.netem(host, "loss", "100%")
        c.send_pending()
        bound = R2_BOUND
        c.wait_rooms(c.ranks(), rooms, bound + 10)
        det = {}
        for side in ("prefill", "decode"):
            rk = c.prefill[0][0] if side == "prefill" else c.decode[0][0]
            ts = [fail_time(rk, r) for r in rooms]
            det[side] = max(t - t_cut if t else float("inf") for t in ts)
        if mode == "down":
            topo.link_up(host)
        else:
            topo.netem(host)
        time.sleep(0.5)
        healed = {}
        ok_h, nbytes, wrong = heal_check(c, out=healed)
        leaks = c.leaks()
        d = max(det.values())
        ok = d <= bound and ok_h and leaks == 0 and wrong == 0
        return row(f"R3 link cut ({'ip link down' if mode == 'down' else 'netem loss 100%'})",
                   "1P1D", rooms_affected=len(rooms), detect_s=d, bound_s=bound,
                   bytes_verified=nbytes, wrong_bytes=wrong, leaks=leaks, ok=ok,
                   note=f"prefill {det['prefill']:.2f}s decode {det['decode']:.2f}s"
                   + ("" if ok_h else "; after restore: " + reasons(c, healed)))
    finally:
        if mode == "down":
            topo.link_up(c.host_of("decode", 0))
        else:
            topo.netem(c.host_of("decode", 0))
        c.crashes = c.close()


def case_netem_slow(topo, rooms_n=8):
    """delay 20ms +-5ms and 2 % loss (tc netem) on the decode host, or where the kernel has
    no netem a 40 Mbit/s tbf rate limit: transfers slow but all succeed."""
    has_netem = topo.tc_supports("netem")
    c = Cluster(topo, 1, 1, pages=32)
    host = c.host_of("decode", 0)
    what = "netem delay 20ms loss 2%" if has_netem else "tbf rate 40mbit (no netem)"
    try:
        if has_netem:
            topo.netem(host, "delay", "20ms", "5ms", "loss", "2%")
        else:
            topo.tbf(host, "40mbit")
        t0 = time.monotonic()
        rooms = c.submit(rooms_n)
        c.wait_rooms(c.ranks(), rooms, 40)
        ok, nbytes, wrong = c.verdict(rooms)
        el = time.monotonic() - t0
        topo.netem(host)
        leaks = c.leaks()
        return row(what, "1P1D", rooms_affected=len(rooms),
                   bytes_verified=nbytes, wrong_bytes=wrong, leaks=leaks,
                   ok=ok and leaks == 0, note=f"{len(rooms)} rooms in {el:.1f}s"
                   + ("" if ok else "; " + reasons(c, rooms)))
    finally:
        topo.netem(host)
        c.crashes = c.close()


def case_bootstrap_restart(topo):
    """The bootstrap server killed and restarted on the same port; ranks that live on must
    serve new rooms (a prefill registers again, or the decode keeps its resolved route)."""
    c = Cluster(topo, 1, 1)
    try:
        ok0, nb0, w0 = heal_check(c)
        b, addr = c.boot[0]
        port = int(addr.rsplit(":", 1)[1])
        b.kill()
        b.killed = True
        time.sleep(0.3)
        c.start_bootstrap(0, port)
        time.sleep(1.0)
        c.decode[0] = [c.start_rank("decode", 0, 0)]  # a fresh decode must resolve anew
        rooms = c.submit(2)
        c.wait_rooms(c.ranks(), rooms, 25)
        ok, nbytes, wrong = c.verdict(rooms)
        leaks = c.leaks()
        return row("bootstrap server restart", "1P1D", rooms_affected=0,
                   bytes_verified=nb0 + nbytes, wrong_bytes=w0 + wrong, leaks=leaks,
                   ok=ok0 and ok and leaks == 0,
                   note="" if ok else "new rooms after restart: " + reasons(c, rooms))
    finally:
        c.crashes = c.close()


def _reaches(etcd, from_member, to_member):
    """Whether a TCP connection from member from_member's host to member to_member's
    client port is accepted within 1 s."""
    host, port = _hostport(etcd.endpoint(to_member))

    def connect():
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            return False
    return etcd.placement.call(from_member, connect)


class _MembersOnHosts:
    """An EtcdCluster placement (pdkv.testing.etcd.Loopback) that runs member i alone on
    topology host hosts[i], so its link is its own to cut."""

    def __init__(self, topo, hosts):
        self.topo, self.hosts = topo, hosts

    def ip(self, i):
        return self.topo.ip(self.hosts[i])

    def command(self, i):
        return self.topo.prefix(self.hosts[i])

    def call(self, i, fn):
        return self.topo.call_in(self.hosts[i], fn)


def case_registry_etcd(topo):
    """The etcd registry (PDKV_REGISTRY=etcd, 3 members): kill -9 of the etcd leader, then
    a partition of the new leader (the killed one back) with rooms in flight. With network
    namespaces each member runs on a host of its own and the partition is real: its link
    goes down (ip link down), so peers and clients lose it mid-stream; without them
    (--no-netns) the members share loopback and the member is frozen with SIGSTOP instead
    (connections open, nothing answered: how a partition looks to its clients). The row's
    fault says which ran. Rooms in flight across the fault, fresh decodes during it (they
    resolve through the majority), after a lease TTL (the prefill's lease lived on) and
    after healing all succeed with verified bytes."""
    try:
        from pdkv.testing.etcd import EtcdCluster, etcd_binary
    except ImportError as e:
        return skipped("etcd registry", "1P1D", f"pdkv package not importable ({e})")
    if etcd_binary() is None:
        return skipped("etcd registry", "1P1D", "etcd is not installed (/usr/bin/etcd)")
    placement = None
    if topo.netns:
        members = [topo.add_host() for _ in range(3)]
        placement = _MembersOnHosts(topo, members)
    with EtcdCluster(3, placement=placement) as etcd:
        if topo.netns:
            how = "ip link down"
            cut, heal = (lambda m: topo.link_down(members[m])), (lambda m: topo.link_up(members[m]))
        else:
            how = "SIGSTOP, no netns"
            cut, heal = etcd.freeze, etcd.thaw
        env = etcd.registry_env("/pdkv-chaos", 3)
        c = Cluster(topo, 1, 1, env=env)
        try:
            ok0, nb0, w0 = heal_check(c)
            notes, ok_all, nb_all, w_all = [], ok0, nb0, w0

            def judge(label, rooms):
                nonlocal ok_all, nb_all, w_all
                c.wait_rooms(c.ranks(), rooms, 25)
                ok, nbytes, wrong = c.verdict(rooms)
                ok_all, nb_all, w_all = ok_all and ok, nb_all + nbytes, w_all + wrong
                if not ok:
                    notes.append(f"{label}: " + reasons(c, rooms))

            def fresh_decode_rooms(label):
                for rk in c.decode[0]:
                    rk.quit()
                c.restart_decode(0)  # resolves anew, through the members left
                judge(label, c.submit(2))

            killed = etcd.leader()
            etcd.kill(killed)
            fresh_decode_rooms("leader killed")
            etcd.restart(killed)
            cut_member = etcd.leader()
            # In flight across the cut: the decode resolves and pre-allocates, the prefill
            # holds its chunks until after it.
            other = (cut_member + 1) % 3
            reached_before = topo.netns and _reaches(etcd, other, cut_member)
            inflight = c.submit(4, send=False)
            cut(cut_member)
            try:
                # The cut is real: from another member's host, the member's client port
                # took connections before and takes none now.
                if topo.netns and (not reached_before or _reaches(etcd, other, cut_member)):
                    notes.append(f"the cut of m{cut_member} is not visible from m{other}'s host "
                                 f"(reached before: {reached_before})")
                    ok_all = False
                c.send_pending()
                judge("rooms in flight across the partition", inflight)
                time.sleep(1.5)  # past an election timeout (1 s): the others lead
                fresh_decode_rooms("during the partition")
                # The prefill's lease lives through the partition (TTL 3 s, renewed by the
                # majority).
                time.sleep(3.5)
                fresh_decode_rooms("partitioned past a lease TTL")
            finally:
                heal(cut_member)
            etcd.wait_healthy(cut_member)
            fresh_decode_rooms("after healing")
            leaks = c.leaks()
            notes.insert(0, f"partitioned member m{cut_member} (leader) by {how}; "
                            f"{len(inflight)} rooms in flight")
            return row(f"etcd leader kill + leader partition ({how})", "1P1D", rooms_affected=0,
                       bytes_verified=nb_all, wrong_bytes=w_all, leaks=leaks,
                       ok=ok_all and leaks == 0, note="; ".join(notes))
        finally:
            c.crashes = c.close()


def _garbage(host, port, n=20):
    rnd = random.Random(port)
    sent = 0
    for i in range(n):
        try:
            s = socket.create_connection((host, port), timeout=1)
            payloads = [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 4096))),
                        b"\xff" + b"\x00" * 8 + b"\x7f",  # ZMTP-looking greeting, then junk
                        b"\x00" * 64, b"\xff" * 100000]
            s.sendall(payloads[i % len(payloads)])
            sent += 1
            s.close()
        except OSError:
            pass
    return sent


def _hostport(ep):
    ep = ep.split("://", 1)[-1]
    h, p = ep.rsplit(":", 1)
    return h, int(p)


def case_garbage(topo):
    """A peer (the driver, from loopback) sends random bytes to every rank's control-plane
    (ZeroMQ) and data-plane (TCP engine) port: ranks survive, later rooms succeed."""
    c = Cluster(topo, 1, 1)
    try:
        rooms = c.submit(2, send=False)
        n = 0
        for rk in c.ranks():
            for key in ("ctrl", "eng"):
                h, p = _hostport(rk.ready[key])
                if topo.netns:
                    # from inside the rank's own namespace
                    import subprocess
                    code = ("import sys;sys.path.insert(0,%r);import cases;print(cases._garbage(%r,%d))"
                            % (os.path.dirname(os.path.abspath(__file__)), h, p))
                    host = 0 if rk.cfg["role"] == "prefill" else c.host_of("decode", 0)
                    r = subprocess.run(topo.prefix(host) + ["/usr/bin/python3", "-c", code],
                                       capture_output=True, text=True, timeout=60)
                    n += int(r.stdout.strip() or 0)
                else:
                    n += _garbage(h, p)
        c.send_pending()
        c.wait_rooms(c.ranks(), rooms, 20)
        ok1, nb1, w1 = c.verdict(rooms)
        alive = all(rk.alive() for rk in c.ranks())
        ok2, nb2, w2 = heal_check(c)
        leaks = c.leaks()
        return row("garbage to ZeroMQ + TCP engine ports", "1P1D", rooms_affected=0,
                   bytes_verified=nb1 + nb2, wrong_bytes=w1 + w2, leaks=leaks,
                   ok=ok1 and ok2 and alive and leaks == 0,
                   note=f"{n} garbage connections" + ("" if alive else "; a rank died")
                   + ("" if ok1 and ok2 else "; " + reasons(c, rooms)))
    finally:
        c.crashes = c.close()


def case_timeouts(topo, decode_unreachable=True):
    """R4: bootstrap timeout (a prefill room no decode pre-allocates for; with
    decode_unreachable also a decode room whose bootstrap address nobody serves) and
    waiting timeout (bootstrapped on both sides, never sent), against configured values."""
    bt, wt = 2.0, 3.0
    env = {"PDKV_BOOTSTRAP_TIMEOUT_S": str(bt), "PDKV_WAITING_TIMEOUT_S": str(wt)}
    c = Cluster(topo, 1, 1, env=env)
    try:
        res = {}
        # waiting timeout: both sides bootstrapped, the prefill never sends
        rooms_w = c.submit(1, send=False)
        rw = list(rooms_w)[0]
        # bootstrap timeout on the prefill: a sender nobody pre-allocates for
        rp = c.next_room
        c.next_room += 1
        c.prefill[0][0].send(op="rooms", rooms=[rp], pages=c.pages, send=False)
        rd = None
        if decode_unreachable:
            c.decode[0][0].wait(lambda ev: ev.get("room") == rw and ev.get("state") == 2, 5)
            rd = c.next_room
            c.next_room += 1
            c.decode[0][0].send(op="rooms", rooms=[rd], pages=c.pages, addr=f"{topo.ip(0)}:1")
        c.wait_rooms([c.prefill[0][0]], [rp, rw], bt + wt + 10)
        c.wait_rooms([c.decode[0][0]], [r for r in (rd, rw) if r], bt + wt + 10)

        def since(rk, r):
            ev = rk.states().get(r)
            return ev["since"] if ev and ev["state"] == FAILED else None

        def waiting(rk, r):
            evs = [e for e in rk.events if e["ev"] == "state" and e["room"] == r]
            t2 = next((e["t"] for e in evs if e["state"] == 2), None)
            tf = next((e["t"] for e in evs if e["state"] == 0), None)
            return tf - t2 if t2 and tf else None

        res["bootstrap_prefill"] = since(c.prefill[0][0], rp)
        if rd:
            res["bootstrap_decode_unreachable"] = since(c.decode[0][0], rd)
        res["waiting_prefill"] = waiting(c.prefill[0][0], rw)
        res["waiting_decode"] = waiting(c.decode[0][0], rw)
        leaks = c.leaks()

        def ref(k):
            return bt if k.startswith("bootstrap") else wt

        def err(k, v):
            return abs(v - ref(k)) / ref(k) if v is not None else 9.9

        worst_k = max(res, key=lambda k: err(k, res[k]))
        return row("R4 bootstrap + waiting timeout", "1P1D", rooms_affected=len(res),
                   detect_s=res[worst_k], bound_s=ref(worst_k), leaks=leaks,
                   ok=all(err(k, v) <= 0.2 for k, v in res.items()) and leaks == 0,
                   note=" ".join(f"{k}={v:.2f}s" if v is not None else f"{k}=none"
                                 for k, v in res.items())
                   + f" (configured {bt}/{wt}s, +-20%)", detail=res,
                   worst_rel_err=err(worst_k, res[worst_k]), worst=worst_k)
    finally:
        c.crashes = c.close()


def silent_listener(ip):
    """A socket on `ip` that accepts connections (the kernel's backlog) and never answers:
    a bootstrap server that hangs."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((ip, 0))
    s.listen(128)
    return s


def case_resolve_hol(topo):
    """Decode rooms whose bootstrap address nobody serves must not hold back the
    bootstrapping of the decode's other rooms (measured: time to WaitingForInput of a room
    with a live prefill, created right after eight rooms with dead bootstrap addresses:
    four naming a closed port, four a server that never answers; twice as many as the
    decode once had resolver threads)."""
    c = Cluster(topo, 1, 1, env={"PDKV_BOOTSTRAP_TIMEOUT_S": "5"})
    silent = silent_listener(topo.ip(0))
    try:
        bad = [c.next_room + i for i in range(8)]
        c.next_room += 8
        c.decode[0][0].send(op="rooms", rooms=bad[:4], pages=c.pages, metadata=False,
                            addr=f"{topo.ip(0)}:1")
        c.decode[0][0].send(op="rooms", rooms=bad[4:], pages=c.pages, metadata=False,
                            addr=f"{topo.ip(0)}:{silent.getsockname()[1]}")
        rooms = c.submit(1)
        c.wait_rooms(c.ranks(), rooms, 15)
        r = list(rooms)[0]
        evs = [e for e in c.decode[0][0].events if e["ev"] == "state" and e["room"] == r]
        # Seconds from the room's creation (the rank's poll may never see Bootstrapping
        # when resolution takes 10 ms, so not the difference of two observed states).
        d = next((e["since"] for e in evs if e["state"] >= 2), None)
        ok_v, nbytes, wrong = c.verdict(rooms)
        c.wait_rooms(c.decode[0], bad, 10)
        leaks = c.leaks()
        bound = 1.0
        return row("dead bootstrap addr vs other rooms", "1P1D", rooms_affected=1,
                   detect_s=d, bound_s=bound, bytes_verified=nbytes, wrong_bytes=wrong,
                   leaks=leaks, ok=d is not None and d <= bound and ok_v and leaks == 0,
                   note="detect_s = delay until the healthy room is bootstrapped")
    finally:
        c.crashes = c.close()
        silent.close()


def case_resolve_shutdown(topo):
    """A decode's shutdown while its rooms are still resolving (a bootstrap server that
    never answers, with the shipping 120 s bootstrap timeout) returns within a second
    (measured: the rank's mgr.shutdown())."""
    c = Cluster(topo, 1, 1, env={"PDKV_BOOTSTRAP_TIMEOUT_S": ""})
    silent = silent_listener(topo.ip(0))
    took = None
    try:
        dec = c.decode[0][0]
        bad = [c.next_room + i for i in range(4)]
        c.next_room += 4
        dec.send(op="rooms", rooms=bad, pages=c.pages, metadata=False,
                 addr=f"{topo.ip(0)}:{silent.getsockname()[1]}")
        time.sleep(1.0)  # the lookups wait for an answer
        rc = dec.quit(timeout=20)
        bye = [e for e in dec.events if e["ev"] == "bye"]
        took = bye[0]["shutdown_s"] if bye else None
        bound = 1.0
        return row("decode shutdown while resolving", "1P1D", rooms_affected=len(bad),
                   detect_s=took, bound_s=bound,
                   ok=took is not None and took <= bound and rc == 0,
                   note="detect_s = the decode's KVManager.shutdown()")
    finally:
        c.crashes = c.close()
        silent.close()


def case_shim(topo, shim, mode, every, calls, n_p=1, n_d=1, p_tp=1, d_tp=1, rounds=3,
              roles=("prefill", "decode"), max_faults=0):
    """Syscall faults in prefill and decode: every room ends (Success with verified bytes
    or Failed with a reason) within the timeouts, never hangs, never wrong bytes; ranks
    survive or exit cleanly. With max_faults, the faults are a transient burst (each
    process injects at most that many): every room of the last round, submitted once the
    burst and the prefill's refusal cooldowns are over, must succeed, i.e. the managers
    heal instead of refusing the peer for the 30 s TTL."""
    env = {"PDKV_FAULT_EVERY_N": str(every), "PDKV_FAULT_MODE": mode,
           "PDKV_FAULT_CALLS": calls, "PDKV_FAULT_STALL_MS": "100",
           "PDKV_FAULT_SKIP": "0" if calls == "connect" else "10",  # let start-up and registration through
           "PDKV_FAULT_MAX": str(max_faults),
           "PDKV_BOOTSTRAP_TIMEOUT_S": "6", "PDKV_WAITING_TIMEOUT_S": "6"}
    name = cfg_name(n_p, n_d, p_tp, d_tp)
    fault = f"shim {mode} every {every} ({calls})" + (f", burst of {max_faults}" if max_faults else "")
    try:
        c = Cluster(topo, n_p, n_d, p_tp, d_tp, env=env, preload=shim, preload_roles=roles)
    except RuntimeError as e:
        return row(fault, name, ok=False, note="ranks did not start: " + str(e)[-200:])
    try:
        total, succ, failed_noreason, hung, nbytes, wrong = 0, 0, 0, 0, 0, 0
        per_round = []  # (decode-rank rooms, of them succeeded)
        why = ""
        for rnd in range(rounds):
            if max_faults and rnd:
                # The prefill refuses a failed peer for 1 s, 2 s after a second failure in
                # a row (PDKV_FAILED_PEER_COOLDOWN_S); the last round comes after both.
                time.sleep(2.5 if rnd == rounds - 1 else 1.2)
            rooms = c.submit(2 * n_p * n_d)
            total += len(rooms)
            done = c.wait_rooms(c.ranks(), rooms, 30)
            succ_before = succ
            expected = sum(len(c.decode[d]) for (_, d) in rooms.values())
            for r, (p, d) in rooms.items():
                for rk in c.prefill[p] + c.decode[d]:
                    if not rk.alive():
                        continue
                    ev = rk.states().get(r)
                    if not ev or ev["state"] not in (FAILED, SUCCESS):
                        hung += 1
                    elif ev["state"] == FAILED and not ev.get("reason"):
                        failed_noreason += 1
                    elif ev["state"] == SUCCESS and rk.cfg["role"] == "decode":
                        if ev.get("bytes_ok"):
                            succ += 1
                            nbytes += ev.get("bytes", 0)
                        else:
                            wrong += 1
            per_round.append((expected, succ - succ_before))
            why = why or (reasons(c, rooms) if not c.verdict(rooms)[0] else "")
            if not done:
                break
        leaks = c.leaks(8)
        died = sum(1 for rk in c.ranks() if not rk.alive())
        ok = hung == 0 and wrong == 0 and failed_noreason == 0 and leaks == 0
        healed = len(per_round) == rounds and per_round[-1][0] == per_round[-1][1]
        if max_faults:
            ok = ok and healed
        ranks = c.ranks()
        c.crashes = c.close()
        time.sleep(0.2)
        injected = 0
        for rk in ranks:
            for line in rk.err:
                if line.startswith("pdkv_fault_shim: injected"):
                    injected += int(line.split()[2])
        return row(fault, name, rooms_affected=total, bytes_verified=nbytes, wrong_bytes=wrong,
                   leaks=leaks, ok=ok and injected > 0, injected=injected,
                   succeeded=succ, expected=sum(e for e, _ in per_round),
                   note=f"{injected} faults injected; {succ} decode-rank rooms ok "
                        f"(per round {' '.join(f'{s}/{e}' for e, s in per_round)}), hung {hung}, "
                        f"failed without reason {failed_noreason}, ranks exited {died}"
                        + ("" if injected else "; NO FAULT INJECTED")
                        + (f"; first failure: {why[:160]}" if why else ""))
    finally:
        if not c.crashes:
            c.crashes = c.close()
