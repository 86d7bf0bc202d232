"""TF Serving's gRPC API: ``PredictionService`` (Predict, GetModelMetadata) and ``ModelService``
(GetModelStatus), on the ``tensorflow-serving-api`` protos."""

from __future__ import annotations

import concurrent.futures
import hmac
import math

from .model import NotFound, RequestError


def start_grpc(server, port):
    """Start the gRPC PredictionService (Predict, GetModelMetadata) and ModelService (GetModelStatus)."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc,
                                         predict_pb2, prediction_service_pb2_grpc)

    def guarded(method):
        def wrapper(self, request, context):
            if server.api_key and not any(
                    k == "authorization" and hmac.compare_digest(v.encode(), f"Bearer {server.api_key}".encode())
                    for k, v in context.invocation_metadata()):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "send the server's key as metadata "
                                                               "('authorization', 'Bearer KEY')")
            try:
                return method(self, request, context)
            except RequestError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            except NotFound as e:
                context.abort(grpc.StatusCode.NOT_FOUND, str(e))
            except concurrent.futures.TimeoutError:
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"the model did not answer within {server.request_timeout_s:g} s")
        return wrapper

    def check_spec(spec):
        if spec.version_label:
            raise RequestError("version labels are not supported; use a version number")
        model = server.served_model(spec.name)
        model.check_model(spec.name, spec.version.value if spec.HasField("version") else None)
        return model

    class Prediction(prediction_service_pb2_grpc.PredictionServiceServicer):
        @guarded
        def Predict(self, request, context):
            model = check_spec(request.model_spec)
            arrays = {}
            for key, proto in request.inputs.items():
                try:
                    arrays[key] = tf.make_ndarray(proto)
                except Exception as e:  # noqa: BLE001
                    raise RequestError(f"input {key!r}: cannot read the TensorProto ({e})") from None
            sig = model.signature(request.model_spec.signature_name)
            remaining = context.time_remaining()  # the client's deadline, if it set one, and the server's own
            out = server.predict(model, sig, arrays, timeout=min(server.request_timeout_s, remaining or math.inf))
            wanted = list(request.output_filter) or list(out)
            missing = set(wanted) - set(out)
            if missing:
                raise RequestError(f"output_filter names unknown outputs {sorted(missing)}; outputs: {sorted(out)}")
            response = predict_pb2.PredictResponse()
            response.model_spec.name = model.name
            response.model_spec.version.value = model.version
            response.model_spec.signature_name = sig.name
            for k in wanted:
                response.outputs[k].CopyFrom(tf.make_tensor_proto(out[k]))
            return response

        @guarded
        def GetModelMetadata(self, request, context):
            model = check_spec(request.model_spec)
            if list(request.metadata_field) != ["signature_def"]:
                raise RequestError("metadata_field must be ['signature_def']")
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = model.name
            response.model_spec.version.value = model.version
            defs = get_model_metadata_pb2.SignatureDefMap()
            for k, v in model.metadata(model.name).items():
                defs.signature_def[k].CopyFrom(v)
            response.metadata["signature_def"].Pack(defs)
            return response

    class Models(model_service_pb2_grpc.ModelServiceServicer):
        @guarded
        def GetModelStatus(self, request, context):
            model = check_spec(request.model_spec)
            response = get_model_status_pb2.GetModelStatusResponse()
            status = response.model_version_status.add()
            status.version = model.version
            status.state = get_model_status_pb2.ModelVersionStatus.AVAILABLE
            return response

    options = [("grpc.max_receive_message_length", server.max_body_bytes),
               ("grpc.max_send_message_length", 64 << 20)]
    grpc_server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16), options=options)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Prediction(), grpc_server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(Models(), grpc_server)
    bound = grpc_server.add_insecure_port(f"{server.host}:{port}")
    if not bound:
        raise OSError(f"cannot bind gRPC to {server.host}:{port}")
    grpc_server.start()
    return grpc_server, bound
