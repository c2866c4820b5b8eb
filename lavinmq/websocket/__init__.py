"""AMQP 0-9-1 and MQTT over WebSocket on every HTTP listener (HTTPS as
WSS), as LavinMQ: an upgrade with sub-protocol `mqtt` (or one starting with
it), or to the path /mqtt or /ws/mqtt, is an MQTT connection; sub-protocol
`amqp`, or any other path, AMQP. After the handshake the socket leaves
aiohttp: `_ws.WebSocketCore` (Cython) takes its bytes and feeds the frames'
payload to the same connection classes as TCP, behind `WebSocketTransport`."""
