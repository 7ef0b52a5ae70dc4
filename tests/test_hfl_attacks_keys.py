"""A deviating server against key dealing (CKKS, Paillier and chaos keys): issue 22, 2.

Before the change a client opened whatever envelope arrived under whatever dealer key
the server relayed, so a server that made up its own key and sealed it for every client
decrypted every upload; the dealer sealed for any name the server listed. The server is
played by the test against real client halves, each with its own identity.
"""

from __future__ import annotations

import secrets

import pytest

from islands.aggregation.keys import (
    _ENVELOPE,
    KeyAck,
    KeyDealRequest,
    KeyDelivery,
    KeyHello,
    KeyOffer,
    _aad,
)
from islands.crypto.envelope import pair_context, seal
from islands.crypto.masking import generate_key
from islands.errors import ProtocolError
from islands.hfl.server_audit import Dealing

CLIENTS = ["c0", "c1", "c2"]


def dealing() -> Dealing:
    return Dealing(CLIENTS, purpose="demo")


def test_an_honest_dealing_gives_every_client_the_dealers_key() -> None:
    d = dealing()
    keys = d.hello()
    dealt = d.step("c0", "deal", KeyDealRequest(keys=keys))
    for c in ("c1", "c2"):
        assert d.step(c, "deliver", KeyDelivery(dealer_key=keys["c0"].key,
                                                dealer_sig=dealt.sig,
                                                sealed=dealt.sealed[c])) == KeyAck(b"ok")
    assert len(set(d.installed.values())) == 1 and set(d.installed) == set(CLIENTS)


def test_a_key_the_server_made_up_is_refused() -> None:
    d = dealing()
    keys = d.hello()
    d.step("c0", "deal", KeyDealRequest(keys=keys))
    own, secret = generate_key(), secrets.token_bytes(32)  # the server's key and secret
    for c in ("c1", "c2"):
        sealed = seal(own, keys[c].key, secret,
                      context=pair_context(_ENVELOPE, d.session, "c0", c),
                      aad=_aad("demo", d.session, c))
        # unsigned, or signed by the server itself: neither is the dealer's signature
        for sig in (b"\x00" * 64, d.ids["server"].sign("demo dealer", own.public)):
            with pytest.raises(ProtocolError, match="'demo dealer' signature of 'c0' does "
                               "not verify"):
                d.step(c, "deliver", KeyDelivery(dealer_key=own.public, dealer_sig=sig,
                                                 sealed=sealed))
    assert set(d.installed) == {"c0"}  # only the dealer's own key was installed


def test_the_server_cannot_deal_itself_or_be_sealed_for() -> None:
    d = dealing()
    with pytest.raises(ProtocolError, match="the dealer 'server' is not a client"):
        d.step("c1", "hello", KeyHello(dealer="server", session=d.session))
    keys = d.hello()
    fake = generate_key()
    for extra in ("server", "stranger"):
        listed = dict(keys, **{extra: KeyOffer(key=fake.public, sig=b"\x00" * 64)})
        with pytest.raises(ProtocolError, match=rf"\['{extra}'\] are not clients"):
            d.step("c0", "deal", KeyDealRequest(keys=listed))
    assert not d.installed


def test_the_dealer_refuses_a_key_the_server_put_in_a_clients_place() -> None:
    d = dealing()
    keys = d.hello()
    fake = generate_key()  # the server would open c2's envelope with it
    keys["c2"] = KeyOffer(key=fake.public, sig=keys["c2"].sig)
    with pytest.raises(ProtocolError, match="'demo key' signature of 'c2' does not verify"):
        d.step("c0", "deal", KeyDealRequest(keys=keys))
    assert not d.installed  # the dealer made no key before checking
