//! `arca health`: asks a running process's `/readyz`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

pub fn run(config: Option<PathBuf>, debug_addr: Option<String>) -> ExitCode {
    let addr = match debug_addr {
        Some(a) => a,
        None => match arca_config::load_from_process(config.as_deref(), Default::default()) {
            Ok(c) => c.debug.addr,
            Err(e) => {
                eprintln!("config error: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let runtime = match crate::command_runtime("arca health") {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // The timer must be created inside the runtime.
    match runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), readyz(&addr)).await })
    {
        Ok(Ok((status, body))) => {
            println!("{}", body.trim_end());
            if status == 200 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Ok(Err(e)) => {
            eprintln!("arca health: {addr}: {e}");
            ExitCode::from(1)
        }
        Err(_) => {
            eprintln!("arca health: {addr}: no answer within 5s");
            ExitCode::from(1)
        }
    }
}

async fn readyz(addr: &str) -> anyhow::Result<(u16, String)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::get("/readyz")
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
