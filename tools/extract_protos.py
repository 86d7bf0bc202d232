"""Write zoo/serving/tf_serving.pb: the protobuf descriptors of TF Serving's gRPC API (PredictionService,
ModelService and every message they use, down to ``tensorflow.TensorProto`` and ``SignatureDef``), as one
``FileDescriptorSet``, so that ``zoo serve`` answers gRPC without importing TensorFlow
(``tensorflow-serving-api``'s Python protos import the ``tensorflow`` package).

    python tools/extract_protos.py          # needs tensorflow-serving-api (the dev environment has it)

The descriptors are TF Serving's own, taken from the installed protos (exact field numbers and names); zoo loads
them into a private descriptor pool (``zoo.serving.protos``), so they never clash with TensorFlow's when a
process also loads TensorFlow.
"""

import os

from google.protobuf import descriptor_pb2
from tensorflow_serving.apis import model_service_pb2, prediction_service_pb2

TARGET = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "zoo", "serving", "tf_serving.pb")


def main():
    ordered, seen = [], set()

    def visit(descriptor):  # dependencies first: the order a pool adds them in
        if descriptor.name in seen:
            return
        seen.add(descriptor.name)
        for dependency in descriptor.dependencies:
            visit(dependency)
        ordered.append(descriptor)

    for module in (prediction_service_pb2, model_service_pb2):
        visit(module.DESCRIPTOR)
    files = descriptor_pb2.FileDescriptorSet()
    for descriptor in ordered:
        files.file.add().MergeFromString(descriptor.serialized_pb)
    with open(TARGET, "wb") as f:
        f.write(files.SerializeToString(deterministic=True))
    print(f"wrote {TARGET}: {len(ordered)} .proto files, {os.path.getsize(TARGET)} bytes")


if __name__ == "__main__":
    main()
