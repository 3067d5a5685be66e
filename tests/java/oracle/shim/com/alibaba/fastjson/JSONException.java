// rmqfs oracle shim (our code): fastjson's unchecked parse/write error.
package com.alibaba.fastjson;

public class JSONException extends RuntimeException {
    public JSONException(String message, Throwable cause) {
        super(message, cause);
    }
}
