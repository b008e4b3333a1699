//! What one hand-over between two threads costs on this machine, the floor
//! under every call that crosses a thread (BENCHMARKS.md, "Through the
//! socket: where a call's time goes"): round trips of a 97-byte message
//! over a Unix socket pair and over a std channel, between two threads.
//! Run it once as is and once pinned to one core, and compare:
//!
//! ```sh
//! cargo bench --bench wake_cost
//! taskset -c 0 target/release/deps/wake_cost-*   # one core
//! ```
//!
//! On a VM whose idle cores halt without polling, the first is tens of
//! microseconds and the second a few: the difference is the wake-up of an
//! idle core, which a remote call pays at each of its crossings.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Round trips per measurement.
const ROUND_TRIPS: u32 = 20_000;
/// Bytes of each message (about a small request's head).
const MESSAGE_BYTES: usize = 97;

fn socket_round_trip() -> std::io::Result<Duration> {
    let (mut a, mut b) = UnixStream::pair()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = [0u8; 256];
        for _ in 0..ROUND_TRIPS {
            let n = b.read(&mut buf)?;
            b.write_all(buf.get(..n).unwrap_or_default())?;
        }
        Ok(())
    });
    let message = [1u8; MESSAGE_BYTES];
    let mut buf = [0u8; 256];
    let start = Instant::now();
    for _ in 0..ROUND_TRIPS {
        a.write_all(&message)?;
        let mut got = 0;
        while got < MESSAGE_BYTES {
            got += a.read(&mut buf)?;
        }
    }
    let took = start.elapsed();
    echo.join()
        .map_err(|_| std::io::Error::other("the echo thread panicked"))??;
    Ok(took / ROUND_TRIPS)
}

fn channel_round_trip() -> Duration {
    let (to_echo, echo_rx) = std::sync::mpsc::channel::<u32>();
    let (to_main, main_rx) = std::sync::mpsc::channel::<u32>();
    let echo = std::thread::spawn(move || {
        while let Ok(v) = echo_rx.recv() {
            if to_main.send(v).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    for i in 0..ROUND_TRIPS {
        if to_echo.send(i).is_err() || main_rx.recv().is_err() {
            break;
        }
    }
    let took = start.elapsed();
    drop(to_echo);
    let _ = echo.join();
    took / ROUND_TRIPS
}

fn main() -> std::io::Result<()> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("cores available to this process: {cores}");
    for _ in 0..2 {
        println!(
            "round trip between two threads: unix socket {:?}, std channel {:?}",
            socket_round_trip()?,
            channel_round_trip()
        );
    }
    Ok(())
}
