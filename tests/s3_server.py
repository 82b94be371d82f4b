"""A moto S3 server on a free loopback port for the s3:// tests, with this process's AWS
environment pointed at it (and nothing of the machine's own AWS setup) while it runs."""
import os
import socket
import threading
from contextlib import contextmanager

CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_DEFAULT_REGION": "us-east-1"}
# Nothing from this machine's own AWS setup may take part.
ISOLATE = {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
           "AWS_EC2_METADATA_DISABLED": "true"}
AWS_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
            "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_EC2_METADATA_DISABLED")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_s3(atomic_puts=False):
    """Start the server -> the AWS variables that reach it; os.environ holds them until the
    end, when it is put back. atomic_puts: moto checks a PutObject's condition and writes
    without a lock between, where S3 does both at once; the tests of conditional writes need
    S3's behaviour."""
    import moto.server as moto_server
    from moto.s3.responses import S3Response

    from kmemscope.dataset import storage

    put = S3Response.put_object
    if atomic_puts:
        lock = threading.Lock()

        def atomic_put(self, *args, **kwargs):
            with lock:
                return put(self, *args, **kwargs)

        S3Response.put_object = atomic_put
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", **CREDS, **ISOLATE}
    saved = {k: os.environ.get(k) for k in AWS_VARS}
    for k in AWS_VARS:
        os.environ.pop(k, None)
    os.environ.update(env)
    storage._fs_cache.clear()
    try:
        yield env
    finally:
        storage._fs_cache.clear()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
        S3Response.put_object = put
