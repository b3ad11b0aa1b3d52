#ifndef FERRY_CDBUS_SHIM_H
#define FERRY_CDBUS_SHIM_H
#include <dbus/dbus.h>
#endif
