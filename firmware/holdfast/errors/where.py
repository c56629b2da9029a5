# Where each error class lives, by idea (errors/__init__.py, the face, looks
# names up here): link.py the link (the OSError family), broker.py what the
# broker refused or broke, outbox.py the outbox's refusal, tls.py TLS
# set-up, websocket.py MQTT over WebSockets.
WHERE = {
    "MQTTTimeout": "link", "LinkDown": "link", "Unreachable": "link",
    "ConnectError": "broker", "SubscribeError": "broker", "MQTTProtocolError": "broker",
    "V5Error": "broker", "OutboxFull": "outbox", "TLSError": "tls",
    "WebSocketError": "websocket", "WebSocketRefused": "websocket",
}
