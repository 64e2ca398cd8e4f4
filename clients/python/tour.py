"""Every RPC of leaf.v1 once, against a running server, printing each request and its answer
(the README's gRPC walk-through was made with it):

    python tour.py [HOST:PORT]        # default localhost:8080; no tokens set on the server

Against a server with `[server.tls]`, name the authority that issued its certificate, and the
client's certificate and key if it has `server.tls.client_ca_file`:

    python tour.py localhost:8443 --ca ca.pem [--cert client.pem --key client-key.pem]

HOST must be a name in the server's certificate (`localhost`, or an IP address it lists).
"""

import argparse

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from leaf_grpc import leaf_pb2, leaf_pb2_grpc, secure_channel


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
        text = f"{e.code().name} {e.details()!r}"
        # Leaf's errors carry an ErrorDetail; a refusal before the service (a missing client
        # certificate, a failed connection) carries none.
        status = rpc_status.from_call(e)
        if status is not None and status.details:
            detail = leaf_pb2.ErrorDetail()
            status.details[0].Unpack(detail)
            text += f" {show(detail)}"
    print(f"{label} {show(request)}\n  -> {text}")


def main():
    parser = argparse.ArgumentParser(description="Every RPC of leaf.v1 once.")
    parser.add_argument("address", nargs="?", default="localhost:8080", help="HOST:PORT")
    parser.add_argument("--ca", help="TLS: the authority of the server's certificate (PEM)")
    parser.add_argument("--cert", help="TLS: the client's certificate (PEM)")
    parser.add_argument("--key", help="TLS: the client's private key (PEM)")
    args = parser.parse_args()
    if (args.cert is None) != (args.key is None):
        parser.error("--cert and --key go together")
    if args.ca or args.cert:
        channel = secure_channel(args.address, args.ca, args.cert, args.key)
    else:
        channel = grpc.insecure_channel(args.address)
    seg = leaf_pb2_grpc.SegmentStub(channel)
    snow = leaf_pb2_grpc.SnowflakeStub(channel)
    admin = leaf_pb2_grpc.AdminStub(channel)
    mono = leaf_pb2_grpc.MonotonicStub(channel)
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
    m = mono.NextMonotonicIds(leaf_pb2.NextMonotonicIdsRequest(count=2))
    call("Monotonic/NextMonotonicIds", mono.NextMonotonicIds, leaf_pb2.NextMonotonicIdsRequest(count=2))
    call("Monotonic/StreamMonotonicIds", mono.StreamMonotonicIds, leaf_pb2.StreamMonotonicIdsRequest(count=5000, chunk=2500))
    call("Monotonic/DecodeMonotonic", mono.DecodeMonotonic, leaf_pb2.DecodeMonotonicRequest(id=m.ids[0]))
    call("Admin/CreateTag", admin.CreateTag, leaf_pb2.CreateTagRequest(tag="order", step=1000, description="orders"))
    call("Admin/CreateTag", admin.CreateTag, leaf_pb2.CreateTagRequest(tag="order"))
    call("Admin/UpdateTag", admin.UpdateTag, leaf_pb2.UpdateTagRequest(tag="order", step=5000))
    call("Segment/NextSegmentIds", seg.NextSegmentIds, leaf_pb2.NextSegmentIdsRequest(tag="order", count=2))
    call("Admin/ListTags", admin.ListTags, leaf_pb2.ListTagsRequest())
    for service in ["", "leaf.v1.Segment", "leaf.v1.Snowflake"]:
        call("grpc.health.v1.Health/Check", health.Check, health_pb2.HealthCheckRequest(service=service))


if __name__ == "__main__":
    main()
