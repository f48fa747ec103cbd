"""An OTLP/gRPC trace receiver for tests: what a collector does with the spans arca exports,
reduced to printing them. Built from PyPI's opentelemetry-proto (the OTLP messages and service
stubs) and grpcio (the gRPC server), which `make deps` installs into .venv.

    .venv/bin/python tests/kit/otlp_receiver.py PORT

Listens on 127.0.0.1:PORT, prints `listening` once it does, then one JSON line per span it
receives: trace_id, span_id and parent_span_id (hex), name, the exporting process's
service.name, the span's string/int/bool attributes and the names of its events.
"""

import json
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind in ("string_value", "int_value", "bool_value", "double_value") else None


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = ""
            for attr in resource_spans.resource.attributes:
                if attr.key == "service.name":
                    service = value(attr.value)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    line = {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "service": service,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                        "events": [e.name for e in span.events],
                    }
                    print(json.dumps(line), flush=True)
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    port = int(sys.argv[1])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("listening", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
