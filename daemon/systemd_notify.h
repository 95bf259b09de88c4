// sd_notify for Type=notify units (READY, STOPPING, WATCHDOG). No-ops when
// not started by systemd.
#ifndef COLLECTIVED_DAEMON_SYSTEMD_NOTIFY_H_
#define COLLECTIVED_DAEMON_SYSTEMD_NOTIFY_H_

#include <cstdint>

namespace collectived::daemon {

void NotifyReady();
void NotifyStopping();
void NotifyWatchdog();
// WatchdogSec of the unit in ns, 0 when no watchdog is asked for.
int64_t WatchdogIntervalNs();

}  // namespace collectived::daemon

#endif  // COLLECTIVED_DAEMON_SYSTEMD_NOTIFY_H_
