"""Every RPC of leaf.v1 once, against a running server, printing each request and its answer
(the README's gRPC walk-through was made with it):

    python tour.py [HOST:PORT]        # default localhost:8080; no tokens set on the server
"""

import sys

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from leaf_grpc import leaf_pb2, leaf_pb2_grpc


def show(message):
    return json_format.MessageToJson(message, indent=None, preserving_proto_field_name=True)


def call(label, method, request):
    try:
        answer = method(request)
        if hasattr(answer, "__iter__") and not hasattr(answer, "ListFields"):
            chunks = list(answer)
            ids = [i for c in chunks for i in c.ids]
            text = f"{len(chunks)} messages, {len(ids)} IDs: {ids[:3]} ... {ids[-1]}"
        else:
            text = show(answer)
    except grpc.RpcError as e:
        status = rpc_status.from_call(e)
        detail = leaf_pb2.ErrorDetail()
        status.details[0].Unpack(detail)
        text = f"{e.code().name} {e.details()!r} {show(detail)}"
    print(f"{label} {show(request)}\n  -> {text}")


def main():
    address = sys.argv[1] if len(sys.argv) > 1 else "localhost:8080"
    channel = grpc.insecure_channel(address)
    seg = leaf_pb2_grpc.SegmentStub(channel)
    snow = leaf_pb2_grpc.SnowflakeStub(channel)
    admin = leaf_pb2_grpc.AdminStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    tag = "leaf-segment-test"
    call("Segment/NextSegmentIds", seg.NextSegmentIds, leaf_pb2.NextSegmentIdsRequest(tag=tag, count=3))
    call("Segment/NextSegmentIds", seg.NextSegmentIds, leaf_pb2.NextSegmentIdsRequest(tag="nope", count=1))
    call("Segment/NextSegmentIds", seg.NextSegmentIds, leaf_pb2.NextSegmentIdsRequest(tag=tag, count=0))
    call("Segment/StreamSegmentIds", seg.StreamSegmentIds, leaf_pb2.StreamSegmentIdsRequest(tag=tag, count=10000))
    call("Segment/AllocateSegment", seg.AllocateSegment, leaf_pb2.AllocateSegmentRequest(tag=tag))
    call("Segment/AllocateSegment", seg.AllocateSegment, leaf_pb2.AllocateSegmentRequest(tag=tag, step=5000))
    call("Segment/GetTag", seg.GetTag, leaf_pb2.GetTagRequest(tag=tag))
    ids = snow.NextSnowflakeIds(leaf_pb2.NextSnowflakeIdsRequest(count=2))
    call("Snowflake/NextSnowflakeIds", snow.NextSnowflakeIds, leaf_pb2.NextSnowflakeIdsRequest(count=2))
    call("Snowflake/StreamSnowflakeIds", snow.StreamSnowflakeIds, leaf_pb2.StreamSnowflakeIdsRequest(count=5000, chunk=2500))
    call("Snowflake/DecodeSnowflake", snow.DecodeSnowflake, leaf_pb2.DecodeSnowflakeRequest(id=ids.ids[0]))
    call("Admin/CreateTag", admin.CreateTag, leaf_pb2.CreateTagRequest(tag="order", step=1000, description="orders"))
    call("Admin/CreateTag", admin.CreateTag, leaf_pb2.CreateTagRequest(tag="order"))
    call("Admin/UpdateTag", admin.UpdateTag, leaf_pb2.UpdateTagRequest(tag="order", step=5000))
    call("Segment/NextSegmentIds", seg.NextSegmentIds, leaf_pb2.NextSegmentIdsRequest(tag="order", count=2))
    call("Admin/ListTags", admin.ListTags, leaf_pb2.ListTagsRequest())
    for service in ["", "leaf.v1.Segment", "leaf.v1.Snowflake"]:
        call("grpc.health.v1.Health/Check", health.Check, health_pb2.HealthCheckRequest(service=service))


if __name__ == "__main__":
    main()
