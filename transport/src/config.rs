//! Tunables of a link and of the QUIC transport under it, with the defaults that give
//! fast failure detection: with `idle_timeout_ms` 2.5 s and a keeper tick every
//! `keepalive_ms` (0.5 s), a dead peer is noticed within 3 s.

use std::time::Duration;

/// Bounds and timings of one link. Every queue has a bound; every wait has a deadline.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Largest frame accepted or sent (version byte and body), checked before allocating.
    pub frame_len_max: usize,
    /// Largest transfer on a separate stream ([`crate::Link::transfer`]).
    pub transfer_len_max: usize,
    /// Requests awaiting a response at once; a further request waits (back-pressure).
    pub requests_in_flight_max: usize,
    /// Bytes of encoded frames queued for the writer; senders wait while it holds this
    /// many (a frame is admitted below the bound, so one frame may overshoot it).
    pub outbound_bytes_max: usize,
    /// Inbound requests and messages queued for the application; the reader stops
    /// reading (and QUIC flow control stops the peer) when it is full.
    pub inbound_queue_max: usize,
    /// QUIC keepalive and application ping interval.
    pub keepalive_ms: u64,
    /// No packet (QUIC) or no frame (link) for this long: the peer is dead.
    pub idle_timeout_ms: u64,
    /// Deadline for connecting, the TLS handshake and the hello exchange.
    pub handshake_ms_max: u64,
    /// First reconnect delay.
    pub backoff_ms_min: u64,
    /// Cap of the reconnect delay.
    pub backoff_ms_max: u64,
    /// TLS handshakes (and enrollments) a listener serves at once; more are refused.
    pub handshakes_max: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            frame_len_max: 1 << 20,
            transfer_len_max: 64 << 20,
            requests_in_flight_max: 1024,
            outbound_bytes_max: 1 << 20,
            inbound_queue_max: 4096,
            keepalive_ms: 500,
            idle_timeout_ms: 2_500,
            handshake_ms_max: 5_000,
            backoff_ms_min: 100,
            backoff_ms_max: 5_000,
            handshakes_max: 64,
        }
    }
}

/// Concurrent bidirectional streams a peer may open (the link stream, and slack).
const BIDI_STREAMS_MAX: u32 = 4;
/// Concurrent unidirectional streams (transfers) a peer may open.
const UNI_STREAMS_MAX: u32 = 16;
/// Flow-control window of one stream.
const STREAM_WINDOW_BYTES: u32 = 8 << 20;
/// Flow-control window of a connection.
const CONNECTION_WINDOW_BYTES: u32 = 16 << 20;

impl LinkConfig {
    /// The QUIC transport parameters for this config: keepalive and idle timeout for fast
    /// failure detection (quinn's defaults: no keepalive, 30 s idle), windows large enough
    /// for bulk transfers on loopback and LANs.
    pub fn transport(&self) -> quinn::TransportConfig {
        let mut transport = quinn::TransportConfig::default();
        transport.keep_alive_interval(Some(Duration::from_millis(self.keepalive_ms.max(1))));
        // An idle timeout out of range (> 2^62 ms) falls back to quinn's default.
        if let Ok(idle) = quinn::IdleTimeout::try_from(Duration::from_millis(self.idle_timeout_ms))
        {
            transport.max_idle_timeout(Some(idle));
        }
        transport.max_concurrent_bidi_streams(quinn::VarInt::from_u32(BIDI_STREAMS_MAX));
        transport.max_concurrent_uni_streams(quinn::VarInt::from_u32(UNI_STREAMS_MAX));
        transport.stream_receive_window(quinn::VarInt::from_u32(STREAM_WINDOW_BYTES));
        transport.receive_window(quinn::VarInt::from_u32(CONNECTION_WINDOW_BYTES));
        transport.send_window(u64::from(CONNECTION_WINDOW_BYTES));
        transport
    }
}
