"""TF Serving's gRPC API: ``PredictionService`` (Predict, GetModelMetadata) and ``ModelService``
(GetModelStatus), on TF Serving's protos loaded without TensorFlow (``zoo.serving.protos``): the same service and
message names, so ``tensorflow-serving-api`` clients call it as they call TF Serving."""

from __future__ import annotations

import concurrent.futures
import hmac
import math

from .model import NotFound, RequestError


def start_grpc(server, port):
    """Start the gRPC PredictionService (Predict, GetModelMetadata) and ModelService (GetModelStatus)."""
    import grpc

    from .protos import message, to_array, to_proto

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

    class Prediction:
        @guarded
        def Predict(self, request, context):
            model = check_spec(request.model_spec)
            arrays = {}
            for key, proto in request.inputs.items():
                try:
                    arrays[key] = to_array(proto)
                except Exception as e:  # noqa: BLE001
                    raise RequestError(f"input {key!r}: cannot read the TensorProto ({e})") from None
            sig = model.signature(request.model_spec.signature_name)
            remaining = context.time_remaining()  # the client's deadline, if it set one, and the server's own
            out = server.predict(model, sig, arrays, timeout=min(server.request_timeout_s, remaining or math.inf))
            wanted = list(request.output_filter) or list(out)
            missing = set(wanted) - set(out)
            if missing:
                raise RequestError(f"output_filter names unknown outputs {sorted(missing)}; outputs: {sorted(out)}")
            response = message("tensorflow.serving.PredictResponse")()
            response.model_spec.name = model.name
            response.model_spec.version.value = model.version
            response.model_spec.signature_name = sig.name
            for k in wanted:
                response.outputs[k].CopyFrom(to_proto(out[k]))
            return response

        @guarded
        def GetModelMetadata(self, request, context):
            model = check_spec(request.model_spec)
            if list(request.metadata_field) != ["signature_def"]:
                raise RequestError("metadata_field must be ['signature_def']")
            response = message("tensorflow.serving.GetModelMetadataResponse")()
            response.model_spec.name = model.name
            response.model_spec.version.value = model.version
            defs = message("tensorflow.serving.SignatureDefMap")()
            for k, v in model.metadata(model.name).items():
                defs.signature_def[k].MergeFromString(v.SerializeToString())  # a TensorFlow proto, or ours
            response.metadata["signature_def"].Pack(defs)
            return response

    class Models:
        @guarded
        def GetModelStatus(self, request, context):
            model = check_spec(request.model_spec)
            response = message("tensorflow.serving.GetModelStatusResponse")()
            status = response.model_version_status.add()
            status.version = model.version
            status.state = status.AVAILABLE
            return response

    def service(name, methods):
        return grpc.method_handlers_generic_handler(f"tensorflow.serving.{name}", {
            method: grpc.unary_unary_rpc_method_handler(
                function, request_deserializer=message(f"tensorflow.serving.{request}").FromString,
                response_serializer=lambda response: response.SerializeToString())
            for method, (function, request) in methods.items()})

    options = [("grpc.max_receive_message_length", server.max_body_bytes),
               ("grpc.max_send_message_length", 64 << 20)]
    grpc_server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16), options=options)
    prediction, models = Prediction(), Models()
    grpc_server.add_generic_rpc_handlers((
        service("PredictionService", {"Predict": (prediction.Predict, "PredictRequest"),
                                      "GetModelMetadata": (prediction.GetModelMetadata, "GetModelMetadataRequest")}),
        service("ModelService", {"GetModelStatus": (models.GetModelStatus, "GetModelStatusRequest")})))
    bound = grpc_server.add_insecure_port(f"{server.host}:{port}")
    if not bound:
        raise OSError(f"cannot bind gRPC to {server.host}:{port}")
    grpc_server.start()
    return grpc_server, bound
