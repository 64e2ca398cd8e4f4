"""The gRPC API from another language, against the real leaf-server binary
(LEAFTEST_SERVER_BIN): IDs from both modes, a streamed bulk load, an unknown tag, the client
token refused and accepted, the health service, and reflection listing the services.

Run by `cargo xtask ci` (and `cargo xtask python`) in a virtual environment of
requirements.txt: python -m unittest -v test_leaf_grpc
"""

import unittest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

from leaf_grpc import Server, leaf_pb2, leaf_pb2_grpc

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
            "leaf.v1.Admin",
            "grpc.health.v1.Health",
        ]:
            self.assertIn(name, services)
        # The whole file, with its messages, comes over the wire.
        desc = db.FindFileContainingSymbol("leaf.v1.Segment")
        self.assertEqual(desc.package, "leaf.v1")
        self.assertIn("NextSegmentIdsRequest", [m.name for m in desc.message_type])


if __name__ == "__main__":
    unittest.main()
