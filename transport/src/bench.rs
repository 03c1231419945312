//! The tunnel benchmark behind `palm bench tunnel`: a real enrolled link on loopback
//! against a bare quinn echo of length-prefixed frames measured in the same run.
//!
//! **Link**: a root (in-memory trust book) and a child enrolled with a token, linked with
//! mTLS; the root answers every request with its body. Measured: 64-byte requests one at a
//! time (rate, RTT p50/p99) and with 64 in flight (rate), and bulk throughput through
//! [`Link::transfer`] streams.
//!
//! **Bare**: the same ring provider and TLS 1.3, no client certificate, one
//! bidirectional stream carrying `[u32 len][64 bytes]` frames that the server echoes
//! back per read. Pipelined twice: the client coalescing every frame it may send into
//! one write (the batching the link's writer does, so that ratio isolates the link's
//! own costs: ids, the pending map, tasks and channels, postcard), and with one write per
//! frame (the "framed on one stream" figure of design §8). Bulk: raw bytes on one
//! unidirectional stream.

use crate::codec::Hello;
use crate::config::LinkConfig;
use crate::endpoint::{LinkEvent, Listener, dial, enroll};
use crate::link::{Inbound, Link};
use crate::pki::{Role, TreeCa};
use crate::token::{Authority, TrustBook};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc};

/// Payload of one request.
pub const PAYLOAD_BYTES: usize = 64;

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Seconds per rate measurement.
    pub seconds: f64,
    /// Requests in flight for the pipelined measurement.
    pub in_flight: usize,
    /// Bytes moved by each bulk measurement.
    pub bulk_bytes: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            seconds: 2.0,
            in_flight: 64,
            bulk_bytes: 256 << 20,
        }
    }
}

/// One side's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    /// Requests per second, one at a time.
    pub one_in_flight_per_s: f64,
    /// Requests per second with `in_flight` at once.
    pub pipelined_per_s: f64,
    /// RTT percentiles one at a time, µs.
    pub rtt_p50_us: f64,
    /// RTT 99th percentile one at a time, µs.
    pub rtt_p99_us: f64,
    /// Bulk throughput, MiB/s.
    pub bulk_mib_per_s: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct TunnelReport {
    /// The enrolled mTLS link.
    pub link: Figures,
    /// The bare framed quinn echo.
    pub bare: Figures,
    /// link / bare (coalesced writes) for the pipelined rate.
    pub pipelined_ratio: f64,
    /// The bare echo's pipelined rate with one write per frame (design §8's "framed").
    pub bare_per_frame_writes_per_s: f64,
    /// link / bare (one write per frame) for the pipelined rate.
    pub pipelined_ratio_per_frame: f64,
    /// link / bare for one at a time.
    pub one_in_flight_ratio: f64,
    /// Requests in flight for the pipelined rate.
    pub in_flight: usize,
    /// Payload bytes per request.
    pub payload_bytes: usize,
}

fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1e6
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs both measurements.
pub async fn tunnel(options: &BenchOptions) -> Result<TunnelReport, String> {
    let link = measure_link(options).await?;
    let (bare, bare_per_frame) = measure_bare(options).await?;
    Ok(TunnelReport {
        pipelined_ratio: link.pipelined_per_s / bare.pipelined_per_s.max(1e-9),
        bare_per_frame_writes_per_s: bare_per_frame,
        pipelined_ratio_per_frame: link.pipelined_per_s / bare_per_frame.max(1e-9),
        one_in_flight_ratio: link.one_in_flight_per_s / bare.one_in_flight_per_s.max(1e-9),
        link,
        bare,
        in_flight: options.in_flight,
        payload_bytes: PAYLOAD_BYTES,
    })
}

async fn measure_link(options: &BenchOptions) -> Result<Figures, String> {
    let config = LinkConfig {
        transfer_len_max: 16 << 20,
        ..LinkConfig::default()
    };
    let ca = TreeCa::generate().map_err(|e| e.to_string())?;
    let root_identity = ca.issue_identity("bench-root").map_err(|e| e.to_string())?;
    let authority = Arc::new(Authority::new(ca, TrustBook::default(), None));
    let (tx, mut events) = mpsc::channel::<LinkEvent<Vec<u8>>>(64);
    let hello = Hello {
        name: "bench-root".into(),
        role: Role::Root,
        node_id: root_identity.node_id(),
        software: env!("CARGO_PKG_VERSION").into(),
    };
    let listener = Listener::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &root_identity,
        Arc::clone(&authority),
        hello,
        config.clone(),
        tx,
    )
    .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().ok_or("listener has no address")?;
    let bulk_received = Arc::new(AtomicU64::new(0));
    let received = Arc::clone(&bulk_received);
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let LinkEvent::LinkUp { mut inbound, .. } = event {
                let received = Arc::clone(&received);
                tokio::spawn(async move {
                    while let Some(item) = inbound.recv().await {
                        match item {
                            Inbound::Request { body, responder } => {
                                let _ = responder.respond(body).await;
                            }
                            Inbound::Transfer(t) => {
                                received.fetch_add(t.bytes.len() as u64, Ordering::Relaxed);
                            }
                            Inbound::Message(_) => {}
                        }
                    }
                });
            }
        }
    });
    let token = authority
        .create_token("bench-child", Role::Edge, 60_000, now_ms())
        .map_err(|e| e.to_string())?;
    let (identity, _) = enroll(&addr.to_string(), &token.encode(), &config)
        .await
        .map_err(|e| e.to_string())?;
    let client = crate::tls::client_config(&identity, &config).map_err(|e| e.to_string())?;
    let me = Hello {
        name: "bench-child".into(),
        role: Role::Edge,
        node_id: identity.node_id(),
        software: env!("CARGO_PKG_VERSION").into(),
    };
    let (_endpoint, link, _inbound) =
        dial::<Vec<u8>>(&addr.to_string(), client, &me, &config).await?;
    let payload = vec![0x5a; PAYLOAD_BYTES];
    // Warm up.
    for _ in 0..2_000 {
        link.request(payload.clone())
            .await
            .map_err(|e| e.to_string())?;
    }
    let (one_rate, mut rtts) = one_at_a_time(options.seconds, || {
        let link = link.clone();
        let payload = payload.clone();
        async move {
            link.request(payload)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    rtts.sort();
    let pipelined = pipelined_link(&link, options).await?;
    let bulk = bulk_link(&link, &bulk_received, options.bulk_bytes).await?;
    link.close("bench done");
    listener.shutdown("bench done").await;
    Ok(Figures {
        one_in_flight_per_s: one_rate,
        pipelined_per_s: pipelined,
        rtt_p50_us: percentile_us(&rtts, 0.5),
        rtt_p99_us: percentile_us(&rtts, 0.99),
        bulk_mib_per_s: bulk,
    })
}

async fn one_at_a_time<F, Fut>(seconds: f64, mut call: F) -> Result<(f64, Vec<Duration>), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut rtts = Vec::with_capacity(100_000);
    let started = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    while started.elapsed() < budget {
        let t = Instant::now();
        call().await?;
        rtts.push(t.elapsed());
    }
    Ok((rtts.len() as f64 / started.elapsed().as_secs_f64(), rtts))
}

async fn pipelined_link(link: &Link<Vec<u8>>, options: &BenchOptions) -> Result<f64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(options.seconds);
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..options.in_flight.max(1) {
        let link = link.clone();
        let done = Arc::clone(&done);
        workers.push(tokio::spawn(async move {
            let payload = vec![0x5a; PAYLOAD_BYTES];
            while Instant::now() < deadline {
                link.request(payload.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), String>(())
        }));
    }
    for worker in workers {
        worker.await.map_err(|e| e.to_string())??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

async fn bulk_link(
    link: &Link<Vec<u8>>,
    received: &AtomicU64,
    total: usize,
) -> Result<f64, String> {
    let chunk = vec![0xa5u8; 8 << 20];
    let count = total.div_ceil(chunk.len()).max(1);
    let target = (count * chunk.len()) as u64;
    let started = Instant::now();
    for _ in 0..count {
        link.transfer(&chunk).await.map_err(|e| e.to_string())?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return Err("bulk transfer did not complete within 60 s".into());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(target as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64())
}

/// The bare echo server's and client's QUIC configs: ring, TLS 1.3, a self-signed cert.
fn bare_configs() -> Result<(quinn::ServerConfig, quinn::ClientConfig), String> {
    let ca = TreeCa::generate().map_err(|e| e.to_string())?;
    let identity = ca.issue_identity("bare").map_err(|e| e.to_string())?;
    let link = LinkConfig::default();
    let mut server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(identity.chain(), identity.private_key())
        .map_err(|e| e.to_string())?;
    server.alpn_protocols = vec![b"bare".to_vec()];
    let server =
        quinn::crypto::rustls::QuicServerConfig::try_from(server).map_err(|e| e.to_string())?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server));
    server.transport_config(Arc::new(link.transport()));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert().clone()).map_err(|e| e.to_string())?;
    let mut client = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"bare".to_vec()];
    let client =
        quinn::crypto::rustls::QuicClientConfig::try_from(client).map_err(|e| e.to_string())?;
    let mut client = quinn::ClientConfig::new(Arc::new(client));
    client.transport_config(Arc::new(link.transport()));
    Ok((server, client))
}

const BARE_FRAME: usize = 4 + PAYLOAD_BYTES;

/// A writer keeps `in_flight` frames outstanding on a fresh stream — coalescing what it
/// may send into one write, or one write per frame — and a reader counts echoed frames
/// and frees their slots.
async fn bare_pipelined(
    conn: &quinn::Connection,
    frame: &[u8],
    options: &BenchOptions,
    coalesce: bool,
) -> Result<f64, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let in_flight = options.in_flight.max(1);
    let slots = Arc::new(Semaphore::new(in_flight));
    let done = Arc::new(AtomicU64::new(0));
    let budget = Duration::from_secs_f64(options.seconds);
    let deadline = Instant::now() + budget;
    let started = Instant::now();
    let reader = {
        let slots = Arc::clone(&slots);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut leftover = 0usize;
            while let Ok(Some(chunk)) = recv.read_chunk(64 << 10, true).await {
                leftover += chunk.bytes.len();
                let frames = leftover / BARE_FRAME;
                leftover %= BARE_FRAME;
                done.fetch_add(frames as u64, Ordering::Relaxed);
                slots.add_permits(frames);
            }
        })
    };
    let mut batch = Vec::with_capacity(in_flight * BARE_FRAME);
    while Instant::now() < deadline {
        let Ok(first) = slots.acquire().await else {
            break;
        };
        first.forget();
        let mut n = 1;
        while coalesce && n < in_flight {
            match slots.try_acquire() {
                Ok(permit) => {
                    permit.forget();
                    n += 1;
                }
                Err(_) => break,
            }
        }
        batch.clear();
        for _ in 0..n {
            batch.extend_from_slice(frame);
        }
        send.write_all(&batch).await.map_err(|e| e.to_string())?;
    }
    // Let the outstanding echoes come back, then count.
    let _ =
        tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(in_flight as u32)).await;
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    let _ = send.finish();
    reader.abort();
    Ok(rate)
}

async fn measure_bare(options: &BenchOptions) -> Result<(Figures, f64), String> {
    let (server_config, client_config) = bare_configs()?;
    let server = quinn::Endpoint::server(server_config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .map_err(|e| e.to_string())?;
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    let bulk_received = Arc::new(AtomicU64::new(0));
    let received = Arc::clone(&bulk_received);
    let accept = server.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accept.accept().await {
            let received = Arc::clone(&received);
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                let echo_conn = conn.clone();
                tokio::spawn(async move {
                    while let Ok((mut send, mut recv)) = echo_conn.accept_bi().await {
                        tokio::spawn(async move {
                            // Echo whole frames back, one write per read.
                            let mut pending: Vec<u8> = Vec::with_capacity(64 << 10);
                            while let Ok(Some(chunk)) = recv.read_chunk(64 << 10, true).await {
                                pending.extend_from_slice(&chunk.bytes);
                                let mut whole = 0;
                                while pending.len() - whole >= 4 {
                                    let mut len = [0u8; 4];
                                    len.copy_from_slice(&pending[whole..whole + 4]);
                                    let len = u32::from_be_bytes(len) as usize;
                                    if pending.len() - whole < 4 + len {
                                        break;
                                    }
                                    whole += 4 + len;
                                }
                                if whole > 0 {
                                    if send.write_all(&pending[..whole]).await.is_err() {
                                        return;
                                    }
                                    pending.drain(..whole);
                                }
                            }
                        });
                    }
                });
                while let Ok(mut stream) = conn.accept_uni().await {
                    let received = Arc::clone(&received);
                    tokio::spawn(async move {
                        while let Ok(Some(chunk)) = stream.read_chunk(1 << 20, false).await {
                            received.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
                        }
                    });
                }
            });
        }
    });
    let client = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))
        .map_err(|e| e.to_string())?;
    let conn = client
        .connect_with(client_config, addr, crate::SERVER_NAME)
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    let mut frame = Vec::with_capacity(BARE_FRAME);
    frame.extend_from_slice(&(PAYLOAD_BYTES as u32).to_be_bytes());
    frame.extend_from_slice(&[0x5a; PAYLOAD_BYTES]);

    // One at a time.
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let mut answer = [0u8; BARE_FRAME];
    for _ in 0..2_000 {
        send.write_all(&frame).await.map_err(|e| e.to_string())?;
        recv.read_exact(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut rtts = Vec::with_capacity(100_000);
    let started = Instant::now();
    let budget = Duration::from_secs_f64(options.seconds);
    while started.elapsed() < budget {
        let t = Instant::now();
        send.write_all(&frame).await.map_err(|e| e.to_string())?;
        recv.read_exact(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        rtts.push(t.elapsed());
    }
    let one_rate = rtts.len() as f64 / started.elapsed().as_secs_f64();
    rtts.sort();

    let _ = send.finish();
    let pipelined = bare_pipelined(&conn, &frame, options, true).await?;
    let per_frame = bare_pipelined(&conn, &frame, options, false).await?;

    // Bulk.
    let chunk = vec![0xa5u8; 8 << 20];
    let count = options.bulk_bytes.div_ceil(chunk.len()).max(1);
    let target = (count * chunk.len()) as u64;
    let started = Instant::now();
    let mut stream = conn.open_uni().await.map_err(|e| e.to_string())?;
    for _ in 0..count {
        stream.write_all(&chunk).await.map_err(|e| e.to_string())?;
    }
    stream.flush().await.map_err(|e| e.to_string())?;
    let _ = stream.finish();
    let wait_deadline = Instant::now() + Duration::from_secs(60);
    while bulk_received.load(Ordering::Relaxed) < target {
        if Instant::now() > wait_deadline {
            return Err("bare bulk did not complete within 60 s".into());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let bulk = target as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64();
    conn.close(quinn::VarInt::from_u32(0), b"bench done");
    server.close(quinn::VarInt::from_u32(0), b"bench done");
    Ok((
        Figures {
            one_in_flight_per_s: one_rate,
            pipelined_per_s: pipelined,
            rtt_p50_us: percentile_us(&rtts, 0.5),
            rtt_p99_us: percentile_us(&rtts, 0.99),
            bulk_mib_per_s: bulk,
        },
        per_frame,
    ))
}
