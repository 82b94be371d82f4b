"""The object-store configuration users meet on AWS: no endpoint, https, virtual-host addressing,
region and credentials from the environment. No network: every request is stopped before it
is sent (botocore's before-send event) and only its URL is kept.

The oracle is the client library's own resolution: a plain botocore client made from the
same environment, asked for the same request. kmemscope's s3fs filesystem (the DuckDB path,
dataset/storage.py) must send the very URL botocore would, signed with the credentials
botocore finds; the Spark settings (storage.spark_conf) must leave Hadoop's S3A on its https,
virtual-host defaults and name the region botocore resolves.
"""
import re

import pytest

import requirements

try:
    import botocore.session
    from fsspec.asyn import sync
except ImportError as exc:                 # s3fs (the [test] extra) brings both
    requirements.skip("setup", f"{exc.name} is not installed (pip install 'kmemscope[test]')",
                      allow_module_level=True)

from kmemscope.dataset import storage

BUCKET, PREFIX = "kmemscope-fleet", "fleet/ds"
KEY_ID, SECRET = "AKIDKMEMSCOPETEST", "kmemscope-test-secret"


class Stopped(Exception):
    """Raised in place of sending a request."""


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """An AWS environment as on a fleet host: keys and region in variables, no endpoint,
    nothing from this machine's files or instance metadata."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "eu-west-1",
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_EC2_METADATA_DISABLED": "true"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    storage._fs_cache.clear()
    yield env
    storage._fs_cache.clear()


def _capture(events):
    """Register a before-send hook on `events` that records each request and stops it."""
    sent = []

    def stop(request, **_):
        sent.append(request)
        raise Stopped(request.url)

    events.register("before-send.s3", stop)
    return sent


def _botocore_head_url(bucket, key):
    """The URL botocore itself gives a HeadObject from this environment."""
    client = botocore.session.Session().create_client("s3")
    sent = _capture(client.meta.events)
    with pytest.raises(Stopped):
        client.head_object(Bucket=bucket, Key=key)
    return client, sent[0]


def _kmemscope_first_request(dataset):
    """The first request kmemscope's s3 filesystem sends for listing `dataset`."""
    fs = storage.filesystem()
    client = fs.connect()
    sent = _capture(client.meta.events)
    with pytest.raises(Exception):       # the stopped request surfaces as kmemscope's error
        storage.list_tables(dataset)
    assert sent, "no request reached the send step"
    return fs, client, sent[0]


def test_the_dataset_is_read_over_https_with_virtual_host_addressing(aws_env):
    _fs, client, request = _kmemscope_first_request(f"s3://{BUCKET}/{PREFIX}")
    oracle_client, oracle = _botocore_head_url(BUCKET, PREFIX)
    assert request.url == oracle.url
    assert request.url == f"https://{BUCKET}.s3.eu-west-1.amazonaws.com/{PREFIX}"
    assert client.meta.endpoint_url == oracle_client.meta.endpoint_url
    assert client.meta.region_name == oracle_client.meta.region_name == "eu-west-1"


def test_requests_are_signed_with_the_environments_credentials_for_its_region(aws_env):
    fs, _client, request = _kmemscope_first_request(f"s3://{BUCKET}/{PREFIX}")
    creds = sync(fs.loop, fs.session.get_credentials)
    oracle = botocore.session.Session().get_credentials()
    assert (creds.access_key, creds.method) == (oracle.access_key, oracle.method) == (KEY_ID, "env")
    # SigV4: the credential scope names the key, the region and the service.
    auth = request.headers["Authorization"]
    auth = auth.decode() if isinstance(auth, bytes) else auth
    assert re.search(rf"Credential={KEY_ID}/\d{{8}}/eu-west-1/s3/aws4_request", auth), auth
    assert SECRET not in auth


def test_a_session_token_from_the_environment_is_sent(aws_env, monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "kmemscope-session-token")
    _fs, _client, request = _kmemscope_first_request(f"s3://{BUCKET}/{PREFIX}")
    token = request.headers["X-Amz-Security-Token"]
    assert (token.decode() if isinstance(token, bytes) else token) == "kmemscope-session-token"


def test_the_bucket_root_lists_through_the_buckets_own_host_name(aws_env):
    _fs, _client, request = _kmemscope_first_request(f"s3://{BUCKET}")
    oracle_client = botocore.session.Session().create_client("s3")
    sent = _capture(oracle_client.meta.events)
    with pytest.raises(Stopped):
        oracle_client.head_bucket(Bucket=BUCKET)
    assert request.url.startswith(f"https://{BUCKET}.s3.eu-west-1.amazonaws.com/")
    assert request.url.split("?")[0] == sent[0].url.split("?")[0]


def test_spark_keeps_s3a_defaults_and_takes_botocores_region(aws_env):
    conf = storage.spark_conf(aws_env)
    region = botocore.session.Session().get_config_variable("region")
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == region == "eu-west-1"
    # No endpoint, no path style, no plain http: S3A's own https virtual-host defaults.
    for key in ("spark.hadoop.fs.s3a.endpoint", "spark.hadoop.fs.s3a.path.style.access",
                "spark.hadoop.fs.s3a.connection.ssl.enabled"):
        assert key not in conf, (key, conf[key])
    # Credentials stay with the AWS provider chain, never in the Spark configuration.
    assert not any(KEY_ID in v or SECRET in v for v in conf.values())
    assert storage.spark_path(f"s3://{BUCKET}/{PREFIX}/t/p.parquet") == \
        f"s3a://{BUCKET}/{PREFIX}/t/p.parquet"
