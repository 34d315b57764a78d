# tw_probe.sh's eyes (no ss on the GPU machines): `list` prints the host's TCP sockets from
# /proc/net/tcp{,6} with their owners; `destroy` ends every TIME_WAIT by SOCK_DESTROY (netlink
# sock_diag) and prints the kernel's answer for each.
import os, socket, struct, sys
ST = {"01": "ESTAB", "06": "TIME_WAIT", "0A": "LISTEN", "08": "CLOSE_WAIT", "04": "FIN_WAIT1", "05": "FIN_WAIT2"}
def owners():
    o = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{p}/fd"):
                l = os.readlink(f"/proc/{p}/fd/{fd}")
                if l.startswith("socket:["): o.setdefault(l[8:-1], []).append(p)
        except OSError: pass
    return o
def addr(h, v6):
    a, p = h.split(":")
    raw = bytes.fromhex(a)
    raw = b"".join(raw[i:i+4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, raw), int(p, 16), raw
def socks():
    for f, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in open(f).read().splitlines()[1:]:
            x = line.split()
            yield v6, addr(x[1], v6), addr(x[2], v6), ST.get(x[3], x[3]), x[5], x[9]
if sys.argv[1] == "list":
    o = owners()
    for v6, l, r, st, timer, ino in socks():
        print(f"{st:10} {l[0]}:{l[1]} -> {r[0]}:{r[1]} timer={timer} pids={','.join(o.get(ino, ['-']))}")
else:
    for v6, l, r, st, timer, ino in socks():
        if st != "TIME_WAIT": continue
        fam = socket.AF_INET6 if v6 else socket.AF_INET
        pad = lambda raw: raw + b"\0" * (16 - len(raw))
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)
        idb = struct.pack("!HH", l[1], r[1]) + pad(l[2]) + pad(r[2]) + struct.pack("=III", 0, 0xffffffff, 0xffffffff)
        req = struct.pack("=BBBBI", fam, 6, 0, 0, 1 << 6) + idb
        s.send(struct.pack("=IHHII", 16 + len(req), 21, 5, 1, 0) + req)
        print("SOCK_DESTROY", f"{l[0]}:{l[1]}", f"{r[0]}:{r[1]}", "->", struct.unpack("=i", s.recv(4096)[16:20])[0])
