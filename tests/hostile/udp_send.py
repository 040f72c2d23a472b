import socket


def solve(port):
    """Send a datagram to a port on loopback that the test listens on."""
    try:
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sender.sendto(b"escaped", ("127.0.0.1", port))
    except OSError as exc:
        return {"sent": False, "error": str(exc)}
    return {"sent": True, "error": ""}
