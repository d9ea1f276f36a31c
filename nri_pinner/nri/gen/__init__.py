"""Generated protobuf messages. DO NOT EDIT: run scripts/gen_protos.py.

api_pb2     -- nri.pkg.api.v1alpha1 (protos/nri/pkg/api/v1alpha1/api.proto)
request_pb2 -- ttrpc Request/Response/KeyValue (protos/ttrpc/request.proto)
status_pb2  -- google.rpc.Status (protos/google/rpc/status.proto)
"""
