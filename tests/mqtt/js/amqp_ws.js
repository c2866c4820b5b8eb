// AMQP 0-9-1 over WebSocket with @cloudamqp/amqp-client (the browser
// client, run under Node): the test drives it line by line on stdin/stdout.
//   node amqp_ws.js URL PREFIX
// Node before 22 has no WebSocket of its own (Debian bookworm's is 18): the
// `ws` package stands in for the browser's then.
// 1. declares an exclusive queue bound to amq.topic with PREFIX.#, prints "ready"
// 2. prints every message it gets as JSON {routingKey, body, headers}
// 3. on the stdin line "publish KEY BODY" publishes to amq.topic (with
//    confirms), prints "published"; on "quit" closes the connection, prints "closed"
if (typeof globalThis.WebSocket === "undefined") globalThis.WebSocket = require("ws")
const { AMQPWebSocketClient } = require("@cloudamqp/amqp-client")
const readline = require("readline")

async function main() {
  const [url, prefix] = process.argv.slice(2)
  const client = new AMQPWebSocketClient(url, "/", "guest", "guest", "lavinmq-test")
  const conn = await client.connect()
  const ch = await conn.channel()
  await ch.confirmSelect()
  const { name } = await ch.queueDeclare("", { exclusive: true })
  await ch.queueBind(name, "amq.topic", `${prefix}.#`)
  await ch.basicConsume(name, { noAck: false }, async (msg) => {
    console.log(JSON.stringify({ routingKey: msg.routingKey, exchange: msg.exchange,
                                 body: msg.bodyToString(), headers: msg.properties.headers || {} }))
    await msg.ack()
  })
  console.log("ready")
  const rl = readline.createInterface({ input: process.stdin })
  for await (const line of rl) {
    const [cmd, key, ...rest] = line.split(" ")
    if (cmd === "publish") {
      await ch.basicPublish("amq.topic", key, rest.join(" "))
      console.log("published")
    } else if (cmd === "quit") {
      await conn.close()
      console.log("closed")
      process.exit(0)
    }
  }
}

main().catch((err) => { console.log("error " + err.message); process.exit(1) })
