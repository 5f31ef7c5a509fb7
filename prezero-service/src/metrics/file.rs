//! The metrics file's writer (`prezero serve --metrics-textfile`): the text of
//! `mod.rs`, replaced whole at every interval by a thread of its own, in a
//! directory no other user may write.

use std::io;
use std::path::{Path, PathBuf};

use crate::log;
use crate::replace_file::replace_file;
use crate::{Error, Result};

/// The metrics file's writer: a thread of its own, so a slow file system never
/// holds up the event loop, which only hands it the rendered text.
pub(crate) struct MetricsFile {
    texts: std::sync::mpsc::SyncSender<String>,
    thread: std::thread::JoinHandle<()>,
}

impl MetricsFile {
    /// Checks the file's directory (no other user may write it: they could
    /// block or replace the file) and that the file can be written now, then
    /// starts the writer. The file is 0640 in the directory's group (make that
    /// node_exporter's): it names every tenant's uid and charge.
    pub(crate) fn start(path: &Path) -> Result<MetricsFile> {
        use std::os::unix::fs::MetadataExt;
        let path = path.to_path_buf();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let md = std::fs::metadata(&dir).map_err(|e| {
            Error::os(
                "the metrics file's directory",
                io::Error::new(e.kind(), format!("{}: {e}", dir.display())),
            )
        })?;
        if md.mode() & 0o002 != 0 {
            return Err(Error::invalid(format!(
                "the metrics file's directory {} is writable by every user, who could block \
                 or replace the file: use one only root or node_exporter's group may write",
                dir.display()
            )));
        }
        let group = Some(md.gid());
        replace_file(&path, b"", 0o640, group).map_err(|e| {
            Error::os(
                "write the metrics file",
                io::Error::new(e.kind(), format!("{}: {e}", path.display())),
            )
        })?;
        // One text waiting at most: a writer that falls behind skips to the latest.
        let (texts, rx) = std::sync::mpsc::sync_channel::<String>(1);
        let thread = std::thread::Builder::new()
            .name("prezero-serve-metrics".into())
            .spawn(move || {
                let mut told = false;
                for text in rx {
                    // node_exporter's textfile collector reads *.prom files
                    // whole: a reader never sees half of one.
                    match replace_file(&path, text.as_bytes(), 0o640, group) {
                        Ok(()) if std::mem::replace(&mut told, false) => log(&format!(
                            "the metrics file {} is written again",
                            path.display()
                        )),
                        Ok(()) => {}
                        Err(e) if !std::mem::replace(&mut told, true) => log(&format!(
                            "cannot write the metrics file {} ({e}); still trying",
                            path.display()
                        )),
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| Error::os("spawn the metrics writer", e))?;
        Ok(MetricsFile { texts, thread })
    }

    /// Queues `text`, unless a text is already waiting: the writer is behind,
    /// and the next one is due soon.
    pub(crate) fn write(&self, text: String) {
        let _ = self.texts.try_send(text);
    }

    /// Writes what is queued and stops (a file system that hangs holds the
    /// shutdown, as it would any daemon writing there).
    pub(crate) fn stop(self) {
        drop(self.texts);
        let _ = self.thread.join();
    }
}
