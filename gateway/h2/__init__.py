"""HTTP/2 as gRPC uses it, written on the worker's event loop: the frames and their reading
(``wire``), the gRPC listeners' server (``server``, ``grpc_server: h2``) with each call's context
(``rpc``), and the client of Triton (``client``, ``upstream.transport: h2``)."""
