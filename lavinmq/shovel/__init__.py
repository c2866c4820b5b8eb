"""Dynamic shovels (LavinMQ's docs/shovels.md): `shovel` parameters of a
vhost, each moving messages from a source queue or exchange to a queue,
exchange or HTTP endpoint. config: the definition; store: a vhost's
shovels; runner: one shovel's life; amqp_session / http_session: one
connected spell to each kind of destination."""
