"""The broker's own AMQP 0-9-1 client, for shovels and federation links:
lavinmq.client.connection (the protocol), .uri (AMQP URIs), .direct (this
broker, in-process). Messages pass through lavinmq._core.relay as bytes."""
