"""The metadata log keeps what was appended and cuts a torn or corrupt tail; the settings loader
names the setting it refuses."""

from __future__ import annotations

import os
import uuid

import pytest

from epochlog.controller.config import ControllerConfig
from epochlog.controller.metalog import FILE_NAME, MetadataLog
from epochlog.controller.records import BrokerRegistered, ControllerStarted, Listener, TopicCreated
from epochlog.settings import SettingsError, load_settings

RECORDS = [ControllerStarted(1),
           BrokerRegistered(1, 1, uuid.uuid4(), "a", (Listener("PLAINTEXT", "h", 1),)),
           TopicCreated("t", uuid.uuid4(), {"retention.ms": "5"})]


def test_appended_records_come_back_after_reopening(tmp_path) -> None:
    log, found = MetadataLog.open(str(tmp_path))
    assert found == []
    log.append(RECORDS[:2])
    log.append(RECORDS[2:])
    log.close()
    log, found = MetadataLog.open(str(tmp_path))
    assert found == RECORDS
    log.close()


@pytest.mark.parametrize("damage", ["torn", "crc"])
def test_a_torn_or_corrupt_tail_is_cut_with_a_warning(tmp_path, caplog, damage) -> None:
    log, _ = MetadataLog.open(str(tmp_path))
    log.append(RECORDS)
    log.close()
    path = os.path.join(tmp_path, FILE_NAME)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if damage == "torn":
            f.truncate(size - 3)
        else:
            f.seek(size - 1)
            last = f.read(1)[0]
            f.seek(size - 1)
            f.write(bytes([last ^ 0xFF]))
    log, found = MetadataLog.open(str(tmp_path))
    assert found == RECORDS[:2]
    assert "cutting the log there" in caplog.text
    log.append(RECORDS[2:])  # the log goes on after the cut
    log.close()
    assert MetadataLog.open(str(tmp_path))[1] == RECORDS


def test_settings_precedence_and_errors_name_the_setting(tmp_path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('data_dir = "/d"\nbroker_session_timeout_ms = 5000\n')
    env = {"EPOCHLOG_BROKER_SESSION_TIMEOUT_MS": "6000", "EPOCHLOG_LISTEN": "0.0.0.0:1"}
    cfg = load_settings(ControllerConfig, {"listen": "127.0.0.1:2"}, toml_path=str(toml),
                        environ=env)
    assert (cfg.data_dir, cfg.broker_session_timeout_ms, cfg.listen) == ("/d", 6000,
                                                                         "127.0.0.1:2")
    with pytest.raises(SettingsError, match=r"broker_session_timeout_ms \(from environment"):
        load_settings(ControllerConfig, {"data_dir": "/d"},
                      environ={"EPOCHLOG_BROKER_SESSION_TIMEOUT_MS": "soon"})
    with pytest.raises(SettingsError, match="setting data_dir is required"):
        load_settings(ControllerConfig, {}, environ={})
    with pytest.raises(SettingsError, match="unknown setting 'bogus'"):
        toml.write_text('data_dir = "/d"\nbogus = 1\n')
        load_settings(ControllerConfig, {}, toml_path=str(toml), environ={})
    with pytest.raises(SettingsError, match="setting listen: expected HOST:PORT"):
        load_settings(ControllerConfig, {"data_dir": "/d", "listen": "nowhere"}, environ={})
