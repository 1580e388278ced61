"""Listener settings in Kafka's form (broker/listeners.py): what a broker accepts and refuses
at start, and that the older `listen`/`internal_listen` settings mean the same plan as their
Kafka spelling. Units: no process, no socket."""

from __future__ import annotations

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.broker.listeners import SecurityProtocol

SSL_FILES = {"ssl_keystore_location": "/k.pem", "ssl_truststore_location": "/ca.pem"}


def config(**settings: str) -> BrokerConfig:
    return BrokerConfig(broker_id=1, data_dir="d", **settings)  # type: ignore[arg-type]


def test_kafka_form_with_named_listeners() -> None:
    c = config(listeners="CLIENT://0.0.0.0:9093,INTERNAL://127.0.0.1:9091",
               advertised_listeners="CLIENT://kafka.example.com:9093",
               listener_security_protocol_map="CLIENT:SSL,INTERNAL:PLAINTEXT",
               inter_broker_listener_name="INTERNAL", **SSL_FILES)
    plan = c.listener_plan
    assert [(lst.name, lst.protocol) for lst in plan.listeners] == [
        ("INTERNAL", SecurityProtocol.PLAINTEXT), ("CLIENT", SecurityProtocol.SSL)]
    assert plan.client == "CLIENT"
    assert plan.named("CLIENT").advertised_address(9093) == ("kafka.example.com", 9093)
    assert plan.named("INTERNAL").advertised_address(9091) == ("127.0.0.1", 9091)


def test_default_map_and_inter_broker_default_are_kafkas() -> None:
    plan = config(listeners="PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                  **SSL_FILES).listener_plan
    assert plan.named("SSL").protocol is SecurityProtocol.SSL
    assert plan.inter_broker == plan.control_plane == "PLAINTEXT"


def test_the_older_settings_are_the_same_plan_as_their_kafka_spelling() -> None:
    older = config(listen="0.0.0.0:9092", advertised="localhost:19092",
                   internal_listen="0.0.0.0:9091", internal_advertised="broker1:9091")
    kafka = config(listeners="EXTERNAL://0.0.0.0:9092,INTERNAL://0.0.0.0:9091",
                   advertised_listeners="EXTERNAL://localhost:19092,INTERNAL://broker1:9091",
                   listener_security_protocol_map="EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT",
                   inter_broker_listener_name="INTERNAL")
    assert older.listener_plan == kafka.listener_plan


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "SASL_SSL://127.0.0.1:9094"}, "SASL is not built yet"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9094"}, "SASL is not built yet"),
    ({"listeners": "CLIENT://127.0.0.1:9092"}, "no security protocol for listener CLIENT"),
    ({"listeners": "127.0.0.1:9092"}, "listeners: expected NAME://HOST:PORT"),
    ({"listeners": "A://h:1,A://h:2", "listener_security_protocol_map": "A:PLAINTEXT"},
     "named twice"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:1", **SSL_FILES}, "both bind port 1"),
    ({"listeners": "PLAINTEXT://h:1", "listen": "h:2"}, "listen: set listeners"),
    ({"listeners": "PLAINTEXT://h:1", "advertised_listeners": "OTHER://h:2"},
     "OTHER is not in listeners"),
    ({"listeners": "PLAINTEXT://h:1", "advertised_listeners": "PLAINTEXT://h:0"},
     "advertised_listeners: needs a real port"),
    ({"listeners": "PLAINTEXT://h:1", "inter_broker_listener_name": "X"}, "X is not a listener"),
    ({"listeners": "A://h:1,B://h:2", "listener_security_protocol_map": "A:PLAINTEXT,B:SSL",
      **SSL_FILES}, "inter_broker_listener_name: not set"),
    ({"listeners": "SSL://h:1", **SSL_FILES}, "control_plane_listener_name: SSL is SSL"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:2"}, "ssl_keystore_location: an SSL listener"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:2", "ssl_keystore_type": "JKS", **SSL_FILES},
     "ssl_keystore_type: only PEM"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:2", "ssl_client_auth": "always", **SSL_FILES},
     "ssl_client_auth: one of none, requested, required"),
    ({"listeners": "PLAINTEXT://h:1,SSL://h:2", "ssl_principal_mapping_rules": "RULE:x",
      **SSL_FILES}, "ssl_principal_mapping_rules: invalid rule"),
    ({"listener_security_protocol_map": "EXTERNAL:TLS"}, "PROTOCOL one of"),
])
def test_bad_listener_settings_are_refused_naming_the_setting(
        settings: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(**settings)


def test_an_older_listener_can_be_ssl_through_the_map() -> None:
    plan = config(listen="127.0.0.1:9093", internal_listen="127.0.0.1:9091",
                  listener_security_protocol_map="EXTERNAL:SSL,INTERNAL:PLAINTEXT",
                  **SSL_FILES).listener_plan
    assert plan.named("EXTERNAL").protocol is SecurityProtocol.SSL
    assert plan.inter_broker == "INTERNAL"


def test_describe_configs_hides_the_key_password_and_names_listeners_once() -> None:
    """DescribeConfigs on a BROKER resource: ssl.key.password is sensitive (no value, as Kafka
    answers), and each setting appears once under one name."""
    from epochlog.broker.handlers._broker_configs import describe_broker

    c = config(listeners="PLAINTEXT://h:1,SSL://h:2", ssl_key_password="hunter2", **SSL_FILES)
    entries = describe_broker(c, None, synonyms=True)
    names = [e.name for e in entries]
    assert len(names) == len(set(names))
    secret = next(e for e in entries if e.name == "ssl.key.password")
    assert secret.is_sensitive and secret.value is None
    assert all(s.value is None for s in secret.synonyms)
    assert "hunter2" not in repr(entries)
    assert next(e for e in entries if e.name == "listeners").value == "PLAINTEXT://h:1,SSL://h:2"
