# MQTT 5, loaded by a client made with level=5 (a 3.1.1 client never loads
# this package). Nothing is imported from the package itself, so it holds no
# names: the shell imports mqtt5.session, an application
# mqtt5.properties (the property identifiers, prop(), user()).
#
#   wire           what every level-5 link reads: the property table, a
#                  property block checked and read, CONNACK and the acks
#   session        Session5: what every level-5 connection runs (CONNECT,
#                  PUBLISH with expiry and topic alias, CONNACK obeyed)
#   properties     the property identifiers, properties written, user
#                  properties and the callback's properties read
#   inbound        an inbound PUBLISH decoded, its topic alias
#   subscriptions  SUBSCRIBE and UNSUBSCRIBE with options, their acks
#   outbox         messages stored with properties, sent again with expiry
#   refused        a message the broker refused
#   packets        every packet a client sends, for tools and tests
#   reasons        the words: reason codes, property names, errors
