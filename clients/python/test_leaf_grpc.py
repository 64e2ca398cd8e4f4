"""The gRPC API from another language, against the real leaf-server binary
(LEAFTEST_SERVER_BIN): IDs from both modes, a streamed bulk load, an unknown tag, the client
token refused and accepted, the health service, and reflection listing the services; and over
TLS (certificates made at run time, certificates.py): IDs over a secure channel, a plaintext
channel and one trusting another authority refused at once, and with a client CA on the
server, a call without a client certificate UNAUTHENTICATED and one with it answered.

Run by `cargo xtask ci` (and `cargo xtask python`) in a virtual environment of
requirements.txt: python -m unittest -v test_leaf_grpc
"""

import tempfile
import time
import unittest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

from certificates import Authority
from leaf_grpc import Server, leaf_pb2, leaf_pb2_grpc, secure_channel

CLIENT_TOKEN = "client-s3cret"
ADMIN_TOKEN = "admin-s3cret"
TAG = "leaf-segment-test"


def bearer(token):
    return [("authorization", f"Bearer {token}")]


def leaf_code(error):
    """Leaf's numeric code, from the status details (a google.rpc.Status holding one
    leaf.v1.ErrorDetail)."""
    status = rpc_status.from_call(error)
    assert status is not None, "the error carries details"
    detail = leaf_pb2.ErrorDetail()
    assert status.details[0].Unpack(detail)
    return detail.code


class LeafGrpc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(
            {
                "LEAF_SERVER__CLIENT_TOKEN": CLIENT_TOKEN,
                "LEAF_SERVER__ADMIN_TOKEN": ADMIN_TOKEN,
            }
        )
        cls.channel = grpc.insecure_channel(cls.server.address)
        cls.segment = leaf_pb2_grpc.SegmentStub(cls.channel)
        cls.snowflake = leaf_pb2_grpc.SnowflakeStub(cls.channel)
        cls.admin = leaf_pb2_grpc.AdminStub(cls.channel)
        cls.monotonic = leaf_pb2_grpc.MonotonicStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def test_ids_from_both_modes(self):
        r = self.segment.NextSegmentIds(
            leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=3), metadata=bearer(CLIENT_TOKEN)
        )
        self.assertEqual(len(r.ids), 3)
        self.assertEqual(list(r.ids), sorted(set(r.ids)))
        s = self.snowflake.NextSnowflakeIds(
            leaf_pb2.NextSnowflakeIdsRequest(count=2), metadata=bearer(CLIENT_TOKEN)
        )
        self.assertEqual(len(s.ids), 2)
        self.assertLess(s.ids[0], s.ids[1])
        # Snowflake IDs exceed 2^53: Python's ints keep every bit.
        self.assertGreater(s.ids[0], 2**53)
        d = self.snowflake.DecodeSnowflake(leaf_pb2.DecodeSnowflakeRequest(id=s.ids[0]))
        self.assertEqual(d.worker_id, 0)
        self.assertTrue(d.time.endswith("Z"), d.time)

    def test_monotonic_ids_only_increase_across_calls_and_streams(self):
        auth = bearer(CLIENT_TOKEN)
        first = self.monotonic.NextMonotonicIds(
            leaf_pb2.NextMonotonicIdsRequest(count=3), metadata=auth
        ).ids
        self.assertEqual(list(first), [first[0], first[0] + 1, first[0] + 2])
        chunks = list(
            self.monotonic.StreamMonotonicIds(
                leaf_pb2.StreamMonotonicIdsRequest(count=2500, chunk=1000), metadata=auth
            )
        )
        streamed = [i for c in chunks for i in c.ids]
        self.assertEqual(len(streamed), 2500)
        self.assertEqual(streamed, sorted(set(streamed)))
        self.assertGreater(streamed[0], first[-1])
        d = self.monotonic.DecodeMonotonic(leaf_pb2.DecodeMonotonicRequest(id=streamed[0]))
        self.assertEqual(d.id, streamed[0])
        self.assertTrue(d.time.endswith("Z"), d.time)
        with self.assertRaises(grpc.RpcError) as e:
            self.monotonic.NextMonotonicIds(leaf_pb2.NextMonotonicIdsRequest(count=1))
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_streamed_bulk_load_gives_distinct_ids(self):
        chunks = list(
            self.segment.StreamSegmentIds(
                leaf_pb2.StreamSegmentIdsRequest(tag=TAG, count=100_000),
                metadata=bearer(CLIENT_TOKEN),
            )
        )
        ids = [i for c in chunks for i in c.ids]
        self.assertEqual(len(ids), 100_000)
        self.assertEqual(len(set(ids)), 100_000)
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(chunks), 100, "the default chunk is 1000 IDs")

    def test_an_unknown_tag_is_not_found_with_leafs_code(self):
        with self.assertRaises(grpc.RpcError) as e:
            self.segment.NextSegmentIds(
                leaf_pb2.NextSegmentIdsRequest(tag="no-such-tag", count=1),
                metadata=bearer(CLIENT_TOKEN),
            )
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("no-such-tag", e.exception.details())
        self.assertEqual(leaf_code(e.exception), -2)

    def test_the_client_token_is_refused_and_accepted(self):
        for metadata in [None, bearer("wrong")]:
            with self.assertRaises(grpc.RpcError) as e:
                self.segment.NextSegmentIds(
                    leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=1), metadata=metadata
                )
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(leaf_code(e.exception), 401)
        r = self.segment.NextSegmentIds(
            leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=1), metadata=bearer(CLIENT_TOKEN)
        )
        self.assertEqual(len(r.ids), 1)
        # The admin service takes the admin token, not the client's.
        with self.assertRaises(grpc.RpcError) as e:
            self.admin.ListTags(leaf_pb2.ListTagsRequest(), metadata=bearer(CLIENT_TOKEN))
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        tags = self.admin.ListTags(leaf_pb2.ListTagsRequest(), metadata=bearer(ADMIN_TOKEN))
        self.assertIn(TAG, [t.tag for t in tags.tags])

    def test_bad_input_is_invalid_argument(self):
        for request in [
            leaf_pb2.NextSegmentIdsRequest(tag="", count=1),
            leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=0),
            leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=10_001),
        ]:
            with self.assertRaises(grpc.RpcError) as e:
                self.segment.NextSegmentIds(request, metadata=bearer(CLIENT_TOKEN))
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, request)

    def test_health_reports_the_node_and_each_mode(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        for service in ["", "leaf.v1.Segment", "leaf.v1.Snowflake"]:
            r = health.Check(health_pb2.HealthCheckRequest(service=service))
            self.assertEqual(r.status, serving, service)
        with self.assertRaises(grpc.RpcError) as e:
            health.Check(health_pb2.HealthCheckRequest(service="leaf.v1.Nothing"))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_reflection_lists_the_services(self):
        db = ProtoReflectionDescriptorDatabase(self.channel)
        services = set(db.get_services())
        for name in [
            "leaf.v1.Segment",
            "leaf.v1.Snowflake",
            "leaf.v1.Monotonic",
            "leaf.v1.Admin",
            "grpc.health.v1.Health",
        ]:
            self.assertIn(name, services)
        # The whole file, with its messages, comes over the wire.
        desc = db.FindFileContainingSymbol("leaf.v1.Segment")
        self.assertEqual(desc.package, "leaf.v1")
        self.assertIn("NextSegmentIdsRequest", [m.name for m in desc.message_type])


def tls_env(cert_file, key_file, client_ca=None):
    env = {
        "LEAF_SERVER__TLS__CERT_FILE": str(cert_file),
        "LEAF_SERVER__TLS__KEY_FILE": str(key_file),
    }
    if client_ca is not None:
        env["LEAF_SERVER__TLS__CLIENT_CA_FILE"] = str(client_ca)
    return env


class Certificates:
    """A temporary directory of an authority `ca` with a server certificate, a client
    certificate, and a second authority `other` with a client certificate of its own."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="leaf-grpc-tls-")
        self.ca = Authority(self.dir.name, "leaf test CA")
        self.server_cert, self.server_key = self.ca.issue("server", server=True)
        self.client_cert, self.client_key = self.ca.issue("client", server=False)
        self.other = Authority(self.dir.name, "another CA")
        self.other_cert, self.other_key = self.other.issue("stranger", server=False)


def refused_at_once(test, call):
    """Asserts that `call` fails with UNAVAILABLE well before its 10 s deadline (a client that
    hangs until the deadline would say DEADLINE_EXCEEDED); the error."""
    started = time.monotonic()
    with test.assertRaises(grpc.RpcError) as e:
        call(timeout=10)
    took = time.monotonic() - started
    what = f"{e.exception.code().name} after {took:.1f} s: {e.exception.details()}"
    test.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE, what)
    test.assertLess(took, 5, what)
    return e.exception


class LeafGrpcOverTls(unittest.TestCase):
    """A server with `[server.tls]` and no client CA."""

    @classmethod
    def setUpClass(cls):
        cls.certs = Certificates()
        env = tls_env(cls.certs.server_cert, cls.certs.server_key)
        env["LEAF_SERVER__CLIENT_TOKEN"] = CLIENT_TOKEN
        cls.server = Server(env, tls_ca=cls.certs.ca.file)
        cls.channel = secure_channel(cls.server.address, ca_file=cls.certs.ca.file)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()
        cls.certs.dir.cleanup()

    def test_ids_from_both_modes_over_a_secure_channel(self):
        segment = leaf_pb2_grpc.SegmentStub(self.channel)
        r = segment.NextSegmentIds(
            leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=3), metadata=bearer(CLIENT_TOKEN)
        )
        self.assertEqual(len(r.ids), 3)
        self.assertEqual(list(r.ids), sorted(set(r.ids)))
        snowflake = leaf_pb2_grpc.SnowflakeStub(self.channel)
        s = snowflake.NextSnowflakeIds(
            leaf_pb2.NextSnowflakeIdsRequest(count=2), metadata=bearer(CLIENT_TOKEN)
        )
        self.assertEqual(len(s.ids), 2)
        self.assertLess(s.ids[0], s.ids[1])
        # The token rule is the same over TLS.
        with self.assertRaises(grpc.RpcError) as e:
            segment.NextSegmentIds(leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=1))
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_a_plaintext_channel_is_refused_at_once(self):
        with grpc.insecure_channel(self.server.address) as plain:
            segment = leaf_pb2_grpc.SegmentStub(plain)
            refused_at_once(
                self,
                lambda timeout: segment.NextSegmentIds(
                    leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=1),
                    metadata=bearer(CLIENT_TOKEN),
                    timeout=timeout,
                ),
            )

    def test_a_channel_trusting_another_authority_is_refused(self):
        with secure_channel(self.server.address, ca_file=self.certs.other.file) as wrong:
            snowflake = leaf_pb2_grpc.SnowflakeStub(wrong)
            refused_at_once(
                self,
                lambda timeout: snowflake.NextSnowflakeIds(
                    leaf_pb2.NextSnowflakeIdsRequest(count=1),
                    metadata=bearer(CLIENT_TOKEN),
                    timeout=timeout,
                ),
            )


class LeafGrpcClientCertificates(unittest.TestCase):
    """A server with `server.tls.client_ca_file` (and the default `client_auth = "all"`)."""

    @classmethod
    def setUpClass(cls):
        cls.certs = Certificates()
        env = tls_env(cls.certs.server_cert, cls.certs.server_key, client_ca=cls.certs.ca.file)
        cls.server = Server(env, tls_ca=cls.certs.ca.file)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.certs.dir.cleanup()

    def channel(self, cert_file=None, key_file=None):
        return secure_channel(
            self.server.address,
            ca_file=self.certs.ca.file,
            cert_file=cert_file,
            key_file=key_file,
        )

    def test_without_a_client_certificate_ids_are_unauthenticated(self):
        with self.channel() as channel:
            for call in [
                lambda: leaf_pb2_grpc.SegmentStub(channel).NextSegmentIds(
                    leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=1)
                ),
                lambda: leaf_pb2_grpc.SnowflakeStub(channel).NextSnowflakeIds(
                    leaf_pb2.NextSnowflakeIdsRequest(count=1)
                ),
            ]:
                with self.assertRaises(grpc.RpcError) as e:
                    call()
                self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
                self.assertIn("client certificate", e.exception.details())
            # The probes' routes stay open: health answers on the same connection.
            health = health_pb2_grpc.HealthStub(channel)
            r = health.Check(health_pb2.HealthCheckRequest(service=""))
            self.assertEqual(r.status, health_pb2.HealthCheckResponse.SERVING)

    def test_with_a_client_certificate_ids_are_given(self):
        with self.channel(self.certs.client_cert, self.certs.client_key) as channel:
            r = leaf_pb2_grpc.SegmentStub(channel).NextSegmentIds(
                leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=2)
            )
            self.assertEqual(len(r.ids), 2)
            s = leaf_pb2_grpc.SnowflakeStub(channel).NextSnowflakeIds(
                leaf_pb2.NextSnowflakeIdsRequest(count=2)
            )
            self.assertEqual(len(s.ids), 2)

    def test_a_client_certificate_of_another_authority_fails_the_handshake(self):
        with self.channel(self.certs.other_cert, self.certs.other_key) as channel:
            segment = leaf_pb2_grpc.SegmentStub(channel)
            refused_at_once(
                self,
                lambda timeout: segment.NextSegmentIds(
                    leaf_pb2.NextSegmentIdsRequest(tag=TAG, count=1), timeout=timeout
                ),
            )


if __name__ == "__main__":
    unittest.main()
