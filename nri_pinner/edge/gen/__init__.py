"""Generated protobuf messages. DO NOT EDIT: run scripts/gen_protos.py.

cri_repair_pb2 -- the CRI UpdateContainerResources/Version subset (protos/cri/repair.proto)
inspect_pb2    -- nri-pinner's inspection service (protos/nri_pinner/inspect.proto)
podresources_pb2 -- the kubelet's pod resources API v1 (protos/kubelet/podresources/v1/api.proto)
"""
