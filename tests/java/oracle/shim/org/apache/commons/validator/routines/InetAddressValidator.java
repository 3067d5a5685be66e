// rmqfs oracle shim (our code): commons-validator is not in ~/.m2; RocketMQ 4.9.8's UtilAll
// (isInternalV4IP/isInternalV6IP helpers) calls only these two checks.
package org.apache.commons.validator.routines;

import java.net.Inet6Address;
import java.net.InetAddress;

public class InetAddressValidator {
    private static final InetAddressValidator INSTANCE = new InetAddressValidator();

    public static InetAddressValidator getInstance() {
        return INSTANCE;
    }

    public boolean isValidInet4Address(String s) {
        if (s == null) {
            return false;
        }
        String[] parts = s.split("\\.", -1);
        if (parts.length != 4) {
            return false;
        }
        for (String p : parts) {
            if (p.isEmpty() || p.length() > 3 || !p.chars().allMatch(Character::isDigit)
                || Integer.parseInt(p) > 255 || (p.length() > 1 && p.charAt(0) == '0')) {
                return false;
            }
        }
        return true;
    }

    public boolean isValidInet6Address(String s) {
        if (s == null || !s.contains(":") || !s.matches("[0-9A-Fa-f:.]+")) {
            return false;
        }
        try {
            return InetAddress.getByName(s) instanceof Inet6Address;  // a literal: no lookup
        } catch (Exception e) {
            return false;
        }
    }
}
